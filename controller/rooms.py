"""How many members of one shape each node could take now: an index kept across decision passes.

Planning a gang means looking at every node it may use (5,000 in a large cluster), on every pass
for every waiting gang. Most of that work answers two cheap questions, which this index answers
without the walk:

* *Can it possibly fit?* Members of one shape (same requests, same eligible nodes) need as many
  slots as there are of them; the nodes offer ``sum(min(room(n), count))``. Fewer means "not now",
  whatever else happens (the planner's per-class slot bound, read from a histogram of rooms).
* *Where to look first?* The nodes, in name order, that have room at all: a gang that fits is
  planned over just enough of them (as kube-scheduler stops after ``percentageOfNodesToScore``),
  and over all of its nodes only when that fails.

An index is built by one walk over its shape's eligible nodes and then kept current node by node
from the nodes whose free capacity changed (``ClusterState.dirty``). It reads the raw free
capacity (nominated pods and room held for other gangs not subtracted), so rooms are upper bounds:
the index only ever says "certainly not" or "try these first", never "fits".
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal

from controller.capacity import subtract
from controller.state import ClusterState
from gang.resources import Resources

_ZERO = Decimal(0)
# A member shape: (placement key, requests with the pod slot as sorted items).
Shape = tuple[str, tuple[tuple[str, Decimal], ...]]


def room(usage: Mapping[str, Decimal], free: Mapping[str, Decimal]) -> int:
    """How many members requesting ``usage`` (the pod slot included) fit in ``free``."""
    count: Decimal | None = None
    for resource, need in usage.items():
        if need > 0:
            here = free.get(resource, 0) // need
            if here <= 0:
                return 0
            if count is None or here < count:
                count = here
    if count is None:
        raise ValueError("a member without a pod slot has unbounded room")
    return int(count)


class RoomIndex:
    """Per node of one shape's eligible nodes, how many members of the shape fit now (only rooms above 0).

    Lazy, in name order: a gang that fits is answered from the first nodes with room, so a new shape costs a
    walk over the nodes its plan needs, not over all of them; a "certainly not" walks them all, once.
    """

    def __init__(self, usage: Resources, nodes: frozenset[str], order: list[str],
                 free: Callable[[str], Resources]) -> None:
        self.usage = usage
        self.nodes = nodes
        self.rooms: dict[str, int] = {}  # of the nodes looked at so far
        self.histogram: Counter[int] = Counter()  # room -> how many of those nodes have exactly that room
        self._free = free
        self._order = order  # ``nodes`` by name
        self._next = 0  # position in ``_order`` of the first node not looked at yet
        self._seen: set[str] = set()
        self._tops: dict[str, list[tuple[Decimal, str]]] = {}  # per resource: a max-heap of (-free, node)

    def room_of(self, node: str) -> int:
        if node not in self._seen and node in self.nodes:
            self._look(node)
        return self.rooms.get(node, 0)

    def _look(self, node: str) -> None:
        self._seen.add(node)
        self._set(node, room(self.usage, self._free(node)))

    def _walk(self, until: Callable[[], bool]) -> None:
        order, seen = self._order, self._seen
        while self._next < len(order) and not until():
            node = order[self._next]
            self._next += 1
            if node not in seen:
                self._look(node)

    def most(self, resource: str) -> Decimal:
        """The most of ``resource`` free on any one of the nodes (what a reason shows when no node holds a member)."""
        self._walk(lambda: False)
        heap = self._tops.get(resource)
        if heap is None or len(heap) > 4 * len(self.nodes) + 64:  # built on first use, rebuilt when mostly stale
            heap = self._tops[resource] = [(-self._free(n).get(resource, _ZERO), n) for n in self.nodes]
            heapq.heapify(heap)
        while heap:  # entries are pushed on every update; an entry is current when it matches the node's free now
            value, node = heap[0]
            if -value == self._free(node).get(resource, _ZERO):
                return -value
            heapq.heappop(heap)
        return _ZERO

    def update(self, node: str, free: Resources) -> None:
        """The node's free capacity changed (a node not looked at yet is read when it is reached)."""
        if node not in self._seen:
            return
        for resource, heap in self._tops.items():
            heapq.heappush(heap, (-free.get(resource, _ZERO), node))
        self._set(node, room(self.usage, free))

    def _set(self, node: str, new: int) -> None:
        old = self.rooms.get(node, 0)
        if new == old:
            return
        if old:
            self.histogram[old] -= 1
            if not self.histogram[old]:
                del self.histogram[old]
        if new:
            self.rooms[node] = new
            self.histogram[new] += 1
        else:
            del self.rooms[node]

    def slots(self, count: int) -> int:
        """How many of ``count`` members of this shape the nodes could take at most, each node on its own: exact
        below ``count`` (every node looked at), otherwise at least ``count``."""
        def total() -> int:
            return sum(min(size, count) * nodes for size, nodes in self.histogram.items())

        self._walk(lambda: total() >= count)
        return total()


class Rooms:
    """The engine's room indexes, one per member shape in use, kept current from the state's dirty nodes."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._indexes: dict[Shape, RoomIndex] = {}
        self._shape_version = state.shape_version
        self._used: set[Shape] = set()
        self._orders: dict[frozenset[str], list[str]] = {}  # sorted node sets, per set of the current node shapes

    def index(self, shape: Shape, nodes: frozenset[str]) -> RoomIndex:
        """The index for ``shape`` over ``nodes`` (its eligible nodes under the current node shapes)."""
        self.refresh()
        self._used.add(shape)
        found = self._indexes.get(shape)
        if found is None or found.nodes is not nodes:
            found = self._indexes[shape] = RoomIndex(dict(shape[1]), nodes, self.sorted_nodes(nodes),
                                                     self.state.free)
        return found

    def sorted_nodes(self, nodes: frozenset[str]) -> list[str]:
        """``nodes`` by name (the planner's order), cached until node shapes change."""
        self.refresh()
        order = self._orders.get(nodes)
        if order is None:
            order = self._orders[nodes] = sorted(nodes)
        return order

    def refresh(self) -> None:
        """Apply the nodes whose capacity changed since the last call; start over when node shapes changed."""
        dirty, self.state.dirty = self.state.dirty, set()
        if self._shape_version != self.state.shape_version:
            self._shape_version = self.state.shape_version
            self._indexes.clear()
            self._orders.clear()
            return
        if dirty and self._indexes:
            free = self.state.free
            for node in dirty:
                capacity = free(node)
                for index in self._indexes.values():
                    index.update(node, capacity)

    def prune(self) -> None:
        """Drop the indexes no gang used since the last prune (call once per pass)."""
        for shape in [s for s in self._indexes if s not in self._used]:
            del self._indexes[shape]
        self._used = set()


def shape_of(key: str, usage: Resources) -> Shape:
    return key, tuple(sorted(usage.items()))


def prefix(order: Iterable[str], demand: Mapping[RoomIndex, int],
           held: Mapping[str, Resources] | None = None, free: Callable[[str], Resources] | None = None) -> list[str]:
    """The first nodes of ``order`` that add room to a demand still open, until every demand is covered; [] when
    all of ``order`` does not cover them. A node with room ``held`` (per node) counts what ``free`` leaves beside it."""
    left = {index: count for index, count in demand.items() if count > 0}
    chosen: list[str] = []
    for node in order:
        took = False
        taken = held.get(node) if held else None
        for index in list(left):
            here = index.room_of(node) if taken is None or free is None else room(
                index.usage, subtract(free(node), taken))
            if here:
                took = True
                left[index] -= here
                if left[index] <= 0:
                    del left[index]
        if took:
            chosen.append(node)
            if not left:
                return chosen
    return []
