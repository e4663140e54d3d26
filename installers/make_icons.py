"""Draw the app icon: resources/icons/app.svg (the source) and, from the same geometry, app-<N>.png, app.ico, app.icns.

A swarm motif: six peers on a hexagon ring, each linked to its neighbours and to a bright centre node.
Run with any Python that has Pillow:  python installers/make_icons.py
"""

from __future__ import annotations

import math
from pathlib import Path

from PIL import Image, ImageDraw

OUT = Path(__file__).resolve().parents[1] / "resources" / "icons"
SIZE = 512
CORNER = 112
BACKGROUND = "#141B34"
LINK = "#3DDC97"
PEER_COLORS = ("#3DDC97", "#FFB547")  # alternate around the ring
CENTER = "#F5F7FF"
RING_RADIUS = 150
PEER_RADIUS = 36
CENTER_RADIUS = 50
LINK_WIDTH = 14
LINK_OPACITY = 0.55
PNG_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)


def peers() -> list[tuple[float, float]]:
    c = SIZE / 2
    return [(c + RING_RADIUS * math.cos(math.radians(90 + 60 * i)),
             c - RING_RADIUS * math.sin(math.radians(90 + 60 * i))) for i in range(6)]


def links() -> list[tuple[tuple[float, float], tuple[float, float]]]:
    ring = peers()
    center = (SIZE / 2, SIZE / 2)
    return [(ring[i], ring[(i + 1) % 6]) for i in range(6)] + [(center, p) for p in ring]


def svg() -> str:
    lines = "\n".join(
        f'    <line x1="{a[0]:.1f}" y1="{a[1]:.1f}" x2="{b[0]:.1f}" y2="{b[1]:.1f}"/>' for a, b in links()
    )
    dots = "\n".join(
        f'  <circle cx="{x:.1f}" cy="{y:.1f}" r="{PEER_RADIUS}" fill="{PEER_COLORS[i % 2]}"/>'
        for i, (x, y) in enumerate(peers())
    )
    return f"""<svg xmlns="http://www.w3.org/2000/svg" width="{SIZE}" height="{SIZE}" viewBox="0 0 {SIZE} {SIZE}">
  <title>RL Swarm</title>
  <rect width="{SIZE}" height="{SIZE}" rx="{CORNER}" fill="{BACKGROUND}"/>
  <g stroke="{LINK}" stroke-width="{LINK_WIDTH}" stroke-linecap="round" stroke-opacity="{LINK_OPACITY}">
{lines}
  </g>
{dots}
  <circle cx="{SIZE / 2:.1f}" cy="{SIZE / 2:.1f}" r="{CENTER_RADIUS}" fill="{CENTER}"/>
</svg>
"""


def raster(scale: int = 4) -> Image.Image:
    """Drawn at 4x and scaled down: Pillow's shapes have no anti-aliasing of their own."""
    s = SIZE * scale
    image = Image.new("RGBA", (s, s), (0, 0, 0, 0))
    ImageDraw.Draw(image).rounded_rectangle((0, 0, s - 1, s - 1), CORNER * scale, fill=BACKGROUND)
    overlay = Image.new("RGBA", (s, s), (0, 0, 0, 0))
    draw = ImageDraw.Draw(overlay)
    alpha = round(255 * LINK_OPACITY)
    rgb = tuple(int(LINK[i:i + 2], 16) for i in (1, 3, 5))
    for a, b in links():
        draw.line((a[0] * scale, a[1] * scale, b[0] * scale, b[1] * scale), fill=(*rgb, alpha),
                  width=LINK_WIDTH * scale)
        for x, y in (a, b):  # round caps
            r = LINK_WIDTH * scale / 2
            draw.ellipse((x * scale - r, y * scale - r, x * scale + r, y * scale + r), fill=(*rgb, alpha))
    image = Image.alpha_composite(image, overlay)
    draw = ImageDraw.Draw(image)
    for i, (x, y) in enumerate(peers()):
        r = PEER_RADIUS * scale
        draw.ellipse((x * scale - r, y * scale - r, x * scale + r, y * scale + r), fill=PEER_COLORS[i % 2])
    r, c = CENTER_RADIUS * scale, s / 2
    draw.ellipse((c - r, c - r, c + r, c + r), fill=CENTER)
    return image.resize((SIZE, SIZE), Image.LANCZOS)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "app.svg").write_text(svg(), encoding="utf-8")
    full = raster()
    for size in PNG_SIZES:
        full.resize((size, size), Image.LANCZOS).save(OUT / f"app-{size}.png", optimize=True)
    full.save(OUT / "app.ico", sizes=[(n, n) for n in (16, 24, 32, 48, 64, 128, 256)])
    full.save(OUT / "app.icns")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
