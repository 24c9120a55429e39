"""The timeline picture as a browser shows it: headless Chromium parses the page (its DOM: a bar group per member,
the bars in stage order, their widths as the times say) and paints it (a screenshot, decoded here with zlib: the
legend's swatches and each bar in their colours where the SVG puts them, the plot empty after a member finished).

Chromium is a system package (Debian ``chromium``): ``make test`` installs it when it is missing; without it these
tests fail, saying so, rather than skip."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from kubenexus.timeline import Gang, Member
from kubenexus.timeline_html import BAR, LEGEND_COLUMN, LEGEND_ROW, LEGEND_Y, SEGMENTS, SWATCH, WIDTH, render

pytestmark = pytest.mark.e2e

T0 = datetime(2026, 11, 26, 3, 0, 0, tzinfo=UTC).timestamp()
COLOURS = {kind: tuple(bytes.fromhex(colour[1:])) for kind, colour, _ in SEGMENTS}
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--force-device-scale-factor=1", "--force-color-profile=srgb", "--hide-scrollbars")


def chromium() -> str:
    path = shutil.which(os.environ.get("CHROMIUM", "chromium"))
    if path is None:
        pytest.fail("headless Chromium is missing: `make test` installs it (Debian package chromium, with apt-get, "
                    "as root); install it yourself, or name its binary in CHROMIUM", pytrace=False)
    return path


def pixels(png: bytes) -> list[list[tuple[int, int, int]]]:
    """An 8-bit RGB or RGBA PNG's rows of (r, g, b): the chunks, inflated, unfiltered (PNG spec, section 9)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    offset, data, header = 8, b"", b""
    while offset < len(png):
        length, kind = struct.unpack(">I4s", png[offset:offset + 8])
        chunk = png[offset + 8:offset + 8 + length]
        header, data = (chunk, data) if kind == b"IHDR" else (header, data + chunk if kind == b"IDAT" else data)
        offset += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    channels = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(data), width * channels
    rows: list[bytearray] = []
    previous = bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if kind == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, previous, strict=True))
        elif kind:
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                up, corner = previous[i], previous[i - channels] if i >= channels else 0
                if kind == 1:
                    line[i] = (line[i] + left) & 0xFF
                elif kind == 3:
                    line[i] = (line[i] + (left + up) // 2) & 0xFF
                else:
                    guess = left + up - corner
                    near = min((abs(guess - left), 0, left), (abs(guess - up), 1, up),
                               (abs(guess - corner), 2, corner))
                    line[i] = (line[i] + near[2]) & 0xFF
        rows.append(line)
        previous = line
    return [[tuple(row[x * channels:x * channels + 3]) for x in range(width)] for row in rows]  # type: ignore[misc]


def member(name: str, *moments: float | None) -> Member:
    created, released, scheduled, running, finished = (*moments, *[None] * (5 - len(moments)))
    assert created is not None
    return Member(name, T0 + created, *(None if m is None else T0 + m for m in (released, scheduled, running,
                                                                                    finished)), "node-a", "Running")


GANGS = [Gang("ml", "resnet", 2, "Succeeded", (member("resnet-0", 0, 3, 5, 8, 14), member("resnet-1", 0, 3, 6, 9, 14))),
         Gang("ml", "bert", 3, "Running", (member("bert-0", 1, 14, 16, 18), member("bert-1", 1, 14, 17, 19),
                                           member("bert-2", 2, 14, 16, 18))),
         Gang("ml", "giant", 2, "NeverFits", (member("giant-0", 2), member("giant-1", 2)))]
NOW = T0 + 24


@dataclass
class Shown:
    page: str  # the HTML as written
    dom: str  # as the browser parsed it
    image: list[list[tuple[int, int, int]]]  # as it painted it


@pytest.fixture(scope="module")
def shown(tmp_path_factory: pytest.TempPathFactory) -> Shown:
    """The page, parsed and painted by one Chromium run (--dump-dom and --screenshot at once)."""
    folder = tmp_path_factory.mktemp("timeline")
    path, shot = folder / "timeline.html", folder / "timeline.png"
    page = render(GANGS, NOW, "namespace ml")
    path.write_text(page, encoding="utf-8")
    height = int(re.search(r'<svg [^>]*height="(\d+)"', page).group(1))  # type: ignore[union-attr]
    done = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={folder / 'profile'}", "--dump-dom",
                           f"--screenshot={shot}", f"--window-size={WIDTH},{height}", path.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return Shown(page, done.stdout, pixels(shot.read_bytes()))


def bars(dom: str) -> dict[str, list[tuple[str, float, float]]]:
    """Per member group of the parsed DOM: its bars (class, x, width)."""
    groups = re.findall(r'<g class="member" data-pod="([^"]+)">(.*?)</g>', dom, re.S)
    return {name: [(kind, float(x), float(width)) for kind, x, width in
                   re.findall(r'<rect class="(\w+)" x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', body)]
            for name, body in groups}


def test_the_browser_parses_a_bar_group_per_member_with_the_stages_in_order(shown):
    dom = shown.dom
    assert "<svg" in dom and "</svg>" in dom and "<script" not in dom
    drawn = bars(dom)
    assert list(drawn) == [m.name for g in GANGS for m in g.members]
    stages = [kind for kind, _, _ in SEGMENTS]
    for name, rects in drawn.items():
        assert [kind for kind, _, _ in rects] == stages[:len(rects)], name
        for (_, x, width), (_, following, _) in zip(rects, rects[1:], strict=False):
            assert x + width == pytest.approx(following, abs=0.02), name  # each bar ends where the next begins
    # widths follow the times: bert waited 13 s for resnet, resnet 3 s; giant waits on; resnet-1 bound later
    waiting = {name: rects[0][2] for name, rects in drawn.items()}
    assert waiting["giant-0"] > waiting["bert-0"] > waiting["resnet-0"] > 0
    assert drawn["resnet-1"][1][2] > drawn["resnet-0"][1][2]  # released longer before its bind
    assert drawn["giant-0"][0][1] + drawn["giant-0"][0][2] > drawn["bert-0"][-1][1]  # waits to the end


def test_the_screenshot_shows_the_legend_and_each_bar_in_its_colour(shown):
    image = shown.image
    height = int(re.search(r'<svg [^>]*height="(\d+)"', shown.page).group(1))  # type: ignore[union-attr]
    assert len(image) == height and len(image[0]) == WIDTH
    for index, (kind, _, _) in enumerate(SEGMENTS):
        left, top = 8 + index % 2 * LEGEND_COLUMN, LEGEND_Y + index // 2 * LEGEND_ROW
        assert image[top + SWATCH // 2][left + SWATCH // 2] == COLOURS[kind], kind
    dom = shown.page
    rows = dict(re.findall(r'data-pod="([^"]+)">.*?<rect class="\w+" x="[\d.]+" y="([\d.]+)"', dom, re.S))
    for name, rects in bars(dom).items():
        middle = round(float(rows[name])) + BAR // 2
        for kind, x, width in rects:
            if width >= 4:
                assert image[middle][round(x + width / 2)] == COLOURS[kind], (name, kind)
    finished = bars(dom)["resnet-0"][-1]
    after = round(finished[1] + finished[2]) + 40  # past resnet's end, between grid lines: the page's white
    assert image[round(float(rows["resnet-0"])) + BAR // 2][after] == (255, 255, 255)
    heading = re.search(r'<text class="gang-name" x="(\d+)" y="(\d+)">', dom)
    assert heading
    x, y = int(heading.group(1)), int(heading.group(2))
    ink = [image[row][col] for row in range(y - 10, y + 2) for col in range(x, x + 200)]
    assert min(sum(p) for p in ink) < 200, "the gang's heading is drawn in dark text"
