#!/usr/bin/env python3
"""Renders fusedcoll emulator traces (FUSEDCOLL_TRACE=file.json) as one timeline PNG.

    scripts/trace-to-png.py -o out.png unfused.json fused.json \\
        --label unfused --label "fused scale-up" [--title TEXT] [--width PX] [--row-height PX]

Each input file becomes one panel, stacked top to bottom, titled by its --label (given in file
order; default: the file name). A panel has one row per track of the trace (the emulator writes
one process per device, "device r", and one thread per compute unit, "CU c") and a "kernels" lane
above them with each kernel's extent (its first workgroup's start to its last one's end, over all
devices). Time runs left to right in microseconds from each trace's first event, on one scale
shared by every panel, so that the panels compare.

Event categories (the Chrome "cat" field) are drawn as:
  - compute spans (gemv, reduce, gemm, pool, anything not named below): boxes in shades of blue;
  - put and zero-copy store (categories "put" and "store"), and in virtual time a link's
    occupancy ("link", on the device's link tracks): green boxes;
  - signal: red ticks (the emulator gives them a nominal 0.5 us);
  - wait: orange, behind the compute boxes (a waiting workgroup holds no compute unit; the
    emulator files the wait under the compute unit that resumed it);
  - wg (a workgroup's residency, start to finish): a grey strip along the bottom of the row;
  - kernel (virtual time: one per kernel, on the device's "kernels" track): the kernels lane.

Needs only the Python 3 standard library (PNG via zlib, a built-in 5x7 bitmap font).
Exit status: 0 on success, 2 on a usage or input error (a missing file, invalid JSON, a file that
is not a fusedcoll trace), 1 if the PNG cannot be written.
"""

import argparse
import json
import math
import os
import struct
import sys
import zlib

PROG = "trace-to-png"

# ------------------------------------------------------------------------------------------------
# Font: 5 columns x 7 rows above the baseline, plus 2 descender rows (g, j, p, q, y, mu).

_FONT_SRC = {
    " ": ".....  .....  .....  .....  .....  .....  .....",
    "!": "..#..  ..#..  ..#..  ..#..  ..#..  .....  ..#..",
    '"': ".#.#.  .#.#.  .....  .....  .....  .....  .....",
    "#": ".#.#.  .#.#.  #####  .#.#.  #####  .#.#.  .#.#.",
    "$": "..#..  .####  #.#..  .###.  ..#.#  ####.  ..#..",
    "%": "##...  ##..#  ...#.  ..#..  .#...  #..##  ...##",
    "&": ".##..  #..#.  #.#..  .#...  #.#.#  #..#.  .##.#",
    "'": "..#..  ..#..  .....  .....  .....  .....  .....",
    "(": "...#.  ..#..  .#...  .#...  .#...  ..#..  ...#.",
    ")": ".#...  ..#..  ...#.  ...#.  ...#.  ..#..  .#...",
    "*": ".....  ..#..  #.#.#  .###.  #.#.#  ..#..  .....",
    "+": ".....  ..#..  ..#..  #####  ..#..  ..#..  .....",
    ",": ".....  .....  .....  .....  .##..  ..#..  .#...",
    "-": ".....  .....  .....  #####  .....  .....  .....",
    ".": ".....  .....  .....  .....  .....  .##..  .##..",
    "/": ".....  ....#  ...#.  ..#..  .#...  #....  .....",
    "0": ".###.  #...#  #..##  #.#.#  ##..#  #...#  .###.",
    "1": "..#..  .##..  ..#..  ..#..  ..#..  ..#..  .###.",
    "2": ".###.  #...#  ....#  ...#.  ..#..  .#...  #####",
    "3": "#####  ...#.  ..#..  ...#.  ....#  #...#  .###.",
    "4": "...#.  ..##.  .#.#.  #..#.  #####  ...#.  ...#.",
    "5": "#####  #....  ####.  ....#  ....#  #...#  .###.",
    "6": "..##.  .#...  #....  ####.  #...#  #...#  .###.",
    "7": "#####  ....#  ...#.  ..#..  .#...  .#...  .#...",
    "8": ".###.  #...#  #...#  .###.  #...#  #...#  .###.",
    "9": ".###.  #...#  #...#  .####  ....#  ...#.  .##..",
    ":": ".....  .##..  .##..  .....  .##..  .##..  .....",
    ";": ".....  .##..  .##..  .....  .##..  ..#..  .#...",
    "<": "...#.  ..#..  .#...  #....  .#...  ..#..  ...#.",
    "=": ".....  .....  #####  .....  #####  .....  .....",
    ">": ".#...  ..#..  ...#.  ....#  ...#.  ..#..  .#...",
    "?": ".###.  #...#  ....#  ...#.  ..#..  .....  ..#..",
    "@": ".###.  #...#  ....#  .##.#  #.#.#  #.#.#  .###.",
    "A": ".###.  #...#  #...#  #####  #...#  #...#  #...#",
    "B": "####.  #...#  #...#  ####.  #...#  #...#  ####.",
    "C": ".###.  #...#  #....  #....  #....  #...#  .###.",
    "D": "###..  #..#.  #...#  #...#  #...#  #..#.  ###..",
    "E": "#####  #....  #....  ####.  #....  #....  #####",
    "F": "#####  #....  #....  ####.  #....  #....  #....",
    "G": ".###.  #...#  #....  #.###  #...#  #...#  .####",
    "H": "#...#  #...#  #...#  #####  #...#  #...#  #...#",
    "I": ".###.  ..#..  ..#..  ..#..  ..#..  ..#..  .###.",
    "J": "..###  ...#.  ...#.  ...#.  ...#.  #..#.  .##..",
    "K": "#...#  #..#.  #.#..  ##...  #.#..  #..#.  #...#",
    "L": "#....  #....  #....  #....  #....  #....  #####",
    "M": "#...#  ##.##  #.#.#  #.#.#  #...#  #...#  #...#",
    "N": "#...#  #...#  ##..#  #.#.#  #..##  #...#  #...#",
    "O": ".###.  #...#  #...#  #...#  #...#  #...#  .###.",
    "P": "####.  #...#  #...#  ####.  #....  #....  #....",
    "Q": ".###.  #...#  #...#  #...#  #.#.#  #..#.  .##.#",
    "R": "####.  #...#  #...#  ####.  #.#..  #..#.  #...#",
    "S": ".####  #....  #....  .###.  ....#  ....#  ####.",
    "T": "#####  ..#..  ..#..  ..#..  ..#..  ..#..  ..#..",
    "U": "#...#  #...#  #...#  #...#  #...#  #...#  .###.",
    "V": "#...#  #...#  #...#  #...#  #...#  .#.#.  ..#..",
    "W": "#...#  #...#  #...#  #.#.#  #.#.#  #.#.#  .#.#.",
    "X": "#...#  #...#  .#.#.  ..#..  .#.#.  #...#  #...#",
    "Y": "#...#  #...#  .#.#.  ..#..  ..#..  ..#..  ..#..",
    "Z": "#####  ....#  ...#.  ..#..  .#...  #....  #####",
    "[": ".###.  .#...  .#...  .#...  .#...  .#...  .###.",
    "\\": ".....  #....  .#...  ..#..  ...#.  ....#  .....",
    "]": ".###.  ...#.  ...#.  ...#.  ...#.  ...#.  .###.",
    "^": "..#..  .#.#.  #...#  .....  .....  .....  .....",
    "_": ".....  .....  .....  .....  .....  .....  #####",
    "`": ".#...  ..#..  .....  .....  .....  .....  .....",
    "a": ".....  .....  .###.  ....#  .####  #...#  .####",
    "b": "#....  #....  #.##.  ##..#  #...#  #...#  ####.",
    "c": ".....  .....  .###.  #....  #....  #...#  .###.",
    "d": "....#  ....#  .##.#  #..##  #...#  #...#  .####",
    "e": ".....  .....  .###.  #...#  #####  #....  .###.",
    "f": "..##.  .#..#  .#...  ###..  .#...  .#...  .#...",
    "g": ".....  .....  .####  #...#  #...#  #...#  .####  ....#  .###.",
    "h": "#....  #....  #.##.  ##..#  #...#  #...#  #...#",
    "i": "..#..  .....  .##..  ..#..  ..#..  ..#..  .###.",
    "j": "...#.  .....  ..##.  ...#.  ...#.  ...#.  ...#.  #..#.  .##..",
    "k": "#....  #....  #..#.  #.#..  ##...  #.#..  #..#.",
    "l": ".##..  ..#..  ..#..  ..#..  ..#..  ..#..  .###.",
    "m": ".....  .....  ##.#.  #.#.#  #.#.#  #.#.#  #.#.#",
    "n": ".....  .....  #.##.  ##..#  #...#  #...#  #...#",
    "o": ".....  .....  .###.  #...#  #...#  #...#  .###.",
    "p": ".....  .....  ####.  #...#  #...#  #...#  ####.  #....  #....",
    "q": ".....  .....  .####  #...#  #...#  #...#  .####  ....#  ....#",
    "r": ".....  .....  #.##.  ##..#  #....  #....  #....",
    "s": ".....  .....  .###.  #....  .###.  ....#  ####.",
    "t": ".#...  .#...  ###..  .#...  .#...  .#..#  ..##.",
    "u": ".....  .....  #...#  #...#  #...#  #..##  .##.#",
    "v": ".....  .....  #...#  #...#  #...#  .#.#.  ..#..",
    "w": ".....  .....  #...#  #...#  #.#.#  #.#.#  .#.#.",
    "x": ".....  .....  #...#  .#.#.  ..#..  .#.#.  #...#",
    "y": ".....  .....  #...#  #...#  #...#  #...#  .####  ....#  .###.",
    "z": ".....  .....  #####  ...#.  ..#..  .#...  #####",
    "{": "...#.  ..#..  ..#..  .#...  ..#..  ..#..  ...#.",
    "|": "..#..  ..#..  ..#..  ..#..  ..#..  ..#..  ..#..",
    "}": ".#...  ..#..  ..#..  ...#.  ..#..  ..#..  .#...",
    "~": ".....  .....  .#...  #.#.#  ...#.  .....  .....",
    "\u00b5": ".....  .....  #...#  #...#  #...#  #..##  ###.#  #....  #....",  # micro sign
    "\u00d7": ".....  #...#  .#.#.  ..#..  .#.#.  #...#  .....",  # multiplication sign
}

GLYPH_W, GLYPH_H = 5, 9  # 7 rows above the baseline + 2 descender rows
FONT = {}
for _ch, _src in _FONT_SRC.items():
    _rows = _src.split()
    _rows += ["....."] * (GLYPH_H - len(_rows))
    FONT[_ch] = [(x, y) for y, r in enumerate(_rows) for x, c in enumerate(r) if c == "#"]


def text_width(s, scale):
    return len(s) * (GLYPH_W + 1) * scale - scale if s else 0


# ------------------------------------------------------------------------------------------------
# A minimal RGB canvas and PNG writer.


def hex_rgb(h):
    h = h.lstrip("#")
    return bytes(int(h[i:i + 2], 16) for i in (0, 2, 4))


class Canvas:
    def __init__(self, w, h, bg="#ffffff"):
        self.w, self.h = w, h
        self.px = bytearray(hex_rgb(bg) * (w * h))

    def rect(self, x0, y0, x1, y1, color):
        """Fills [x0, x1) x [y0, y1), clipped to the canvas."""
        x0, x1 = max(0, int(x0)), min(self.w, int(x1))
        y0, y1 = max(0, int(y0)), min(self.h, int(y1))
        if x0 >= x1 or y0 >= y1:
            return
        rgb = hex_rgb(color) if isinstance(color, str) else color
        line = rgb * (x1 - x0)
        for y in range(y0, y1):
            o = (y * self.w + x0) * 3
            self.px[o:o + len(line)] = line

    def hline(self, x0, x1, y, color):
        self.rect(x0, y, x1, y + 1, color)

    def vline(self, x, y0, y1, color):
        self.rect(x, y0, x + 1, y1, color)

    def frame(self, x0, y0, x1, y1, color):
        self.hline(x0, x1, y0, color)
        self.hline(x0, x1, y1 - 1, color)
        self.vline(x0, y0, y1, color)
        self.vline(x1 - 1, y0, y1, color)

    def text(self, x, y, s, color="#000000", scale=2, bold=False):
        """Draws `s` with its top-left corner at (x, y); returns the x after the text."""
        rgb = hex_rgb(color)
        for ch in s:
            for gx, gy in FONT.get(ch, FONT["?"]):
                px, py = x + gx * scale, y + gy * scale
                self.rect(px, py, px + scale + (1 if bold else 0), py + scale, rgb)
            x += (GLYPH_W + 1) * scale
        return x

    def png(self):
        raw = bytearray()
        stride = self.w * 3
        for y in range(self.h):
            raw.append(0)  # filter: none
            raw += self.px[y * stride:(y + 1) * stride]

        def chunk(kind, data):
            c = struct.pack(">I", len(data)) + kind + data
            return c + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

        ihdr = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)  # 8-bit RGB
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) +
                chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + chunk(b"IEND", b""))


# ------------------------------------------------------------------------------------------------
# Reading traces.


class InputError(Exception):
    pass


def _number(e, key, where):
    v = e.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise InputError(f"{where}: field '{key}' is {json.dumps(v)}, not a finite number")
    return float(v)


class Trace:
    """The complete ('X') events of one file, by track, plus the track names."""

    def __init__(self, path, label):
        self.path, self.label = path, label
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise InputError(f"cannot read '{path}': {e.strerror or e}") from None
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as e:
            raise InputError(f"'{path}' is not valid JSON: {e}") from None
        if isinstance(doc, dict):
            events = doc.get("traceEvents")
        else:
            events = doc  # the JSON Array Format is a bare list of events
        if not isinstance(events, list):
            raise InputError(f"'{path}' is not a Chrome trace: no 'traceEvents' list")
        self.proc_names, self.thread_names = {}, {}
        self.events = []  # (pid, tid, cat, name, ts, dur)
        for i, e in enumerate(events):
            where = f"'{path}': event #{i}"
            if not isinstance(e, dict):
                raise InputError(f"{where} is not an object")
            ph = e.get("ph")
            if ph == "M":
                args = e.get("args") if isinstance(e.get("args"), dict) else {}
                name = args.get("name")
                if e.get("name") == "process_name" and isinstance(name, str):
                    self.proc_names[e.get("pid")] = name
                elif e.get("name") == "thread_name" and isinstance(name, str):
                    self.thread_names[(e.get("pid"), e.get("tid"))] = name
                continue
            if ph != "X":
                continue  # instant, counter, async...: not written by fusedcoll, not drawn
            ts, dur = _number(e, "ts", where), _number(e, "dur", where)
            if dur < 0:
                raise InputError(f"{where} has a negative duration ({dur})")
            pid, tid = e.get("pid", 0), e.get("tid", 0)
            if not all(isinstance(v, (int, str)) and not isinstance(v, bool) for v in (pid, tid)):
                raise InputError(f"{where}: 'pid' and 'tid' must be integers or strings")
            cat = e.get("cat") if isinstance(e.get("cat"), str) else ""
            name = e.get("name") if isinstance(e.get("name"), str) else ""
            self.events.append((pid, tid, cat, name, ts, dur))
        if not self.events:
            raise InputError(f"'{path}' holds no complete ('X') events: was the run traced "
                             "(FUSEDCOLL_TRACE) and did its World finish?")
        self.t0 = min(ev[4] for ev in self.events)
        self.span = max(ev[4] + ev[5] for ev in self.events) - self.t0
        # Virtual-time traces carry each kernel on a "kernels" track of its device: they are drawn
        # in the kernels lane, not as a row.
        self.kernel_events = [ev for ev in self.events if ev[2] == "kernel"]
        self.events = [ev for ev in self.events if ev[2] != "kernel"]
        kernel_tracks = {(ev[0], ev[1]) for ev in self.kernel_events}
        tracks = ({(ev[0], ev[1]) for ev in self.events} | set(self.thread_names)) - kernel_tracks
        self.tracks = sorted(tracks, key=lambda k: (_sort_key(k[0]), _sort_key(k[1])))
        self.devices = {p for p, _ in self.tracks}

    def track_label(self, track):
        pid, tid = track
        proc = self.proc_names.get(pid, f"pid {pid}").replace("device ", "dev ")
        return f"{proc} {self.thread_names.get(track, f'tid {tid}')}"

    def kernels(self):
        """[(name, start, end)] over all devices, from the 'wg' events ('<kernel> wg <id>'), or in
        virtual time from the 'kernel' events."""
        ext = {}
        for _, _, cat, name, ts, dur in self.events + self.kernel_events:
            if cat not in ("wg", "kernel"):
                continue
            kernel = name.rsplit(" wg ", 1)[0] if " wg " in name else name
            lo, hi = ext.get(kernel, (math.inf, -math.inf))
            ext[kernel] = (min(lo, ts), max(hi, ts + dur))
        return sorted(((k, lo, hi) for k, (lo, hi) in ext.items()), key=lambda k: k[1])


def _sort_key(v):
    return (0, v, "") if isinstance(v, int) else (1, 0, str(v))


# ------------------------------------------------------------------------------------------------
# Drawing.

INK, GRID, MUTED = "#202020", "#e4e4e4", "#707070"
BAND = ("#ffffff", "#f3f5f8")  # alternate devices
PUT, SIGNAL, WAIT, WG = "#2ca02c", "#d62728", "#ffb84d", "#c4c4c4"
KERNEL_FILL = ("#9aa7b8", "#c0c9d6")
COMPUTE_SHADES = ("#1f5fa8", "#6aaee8", "#0b3866", "#3f86cf", "#9ccbf2", "#2a4f7a")
SPECIAL = {"put", "store", "link", "signal", "wait", "wg"}


def nice_step(span, target_ticks):
    raw = span / max(1, target_ticks)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def plural(n, word):
    return f"{n} {word}" + ("" if n == 1 else "s")


def fmt_time(v):
    return f"{v:g}" if abs(v) < 1e6 else f"{v:.3g}"


def render(traces, out_path, title, width, row_h):
    S = 2  # text scale: 10x14 px glyphs
    line_h = (GLYPH_H + 2) * S
    compute_cats = []
    for t in traces:
        for ev in t.events:
            if ev[2] not in SPECIAL and ev[2] not in compute_cats:
                compute_cats.append(ev[2])
    shade = {c: COMPUTE_SHADES[i % len(COMPUTE_SHADES)] for i, c in enumerate(compute_cats)}

    label_w = max(text_width(t.track_label(k), S) for t in traces for k in t.tracks)
    label_w = max(label_w, text_width("kernels", S))
    left, right = 16 + label_w + 12, 24
    plot_w = width - left - right
    if plot_w < 200:
        raise InputError(f"--width {width} leaves no room for the plot; use at least "
                         f"{left + right + 200}")
    span = max(t.span for t in traces) or 1.0
    step = nice_step(span, max(4, plot_w // 110))
    x_max = math.ceil(span / step) * step

    def x_of(us):
        return left + us / x_max * plot_w

    # Vertical layout.
    top = 12
    title_h = line_h + 10 if title else 0
    legend_h = line_h + 14
    kernel_h = row_h
    panel_heights = []
    for t in traces:
        panel_heights.append(line_h + 8 + kernel_h + 6 + len(t.tracks) * row_h + 4 + line_h * 2 + 18)
    height = top + title_h + legend_h + sum(panel_heights) + 8
    cv = Canvas(width, height)

    y = top
    if title:
        cv.text(left, y, title, INK, S, bold=True)
        y += title_h

    # Legend.
    lx = left
    items = [(c, shade[c], "box") for c in compute_cats]
    items += [("put/store", PUT, "box"), ("signal", SIGNAL, "tick"), ("wait", WAIT, "box"),
              ("WG resident", WG, "strip")]
    for name, color, kind in items:
        sw_y0, sw_y1 = y + 1, y + GLYPH_H * S - 3
        if kind == "box":
            cv.rect(lx, sw_y0, lx + 22, sw_y1, color)
        elif kind == "tick":
            cv.rect(lx + 9, sw_y0, lx + 12, sw_y1, color)
        else:
            cv.rect(lx, sw_y1 - 5, lx + 22, sw_y1, color)
        lx = cv.text(lx + 28, y, name, INK, S) + 24
    y += legend_h

    for t, ph in zip(traces, panel_heights):
        y_panel = y
        # Panel title and summary.
        cv.text(16, y, t.label, INK, S, bold=True)
        n_cu = len(t.tracks)
        summary = (f"{plural(len(t.devices), 'device')}, {plural(n_cu, 'track')}, "
                   f"{plural(len(t.events), 'event')}, {fmt_time(round(t.span))} \u00b5s")
        cv.text(width - right - text_width(summary, S), y, summary, MUTED, S)
        y += line_h + 8
        rows_top = y + kernel_h + 6
        rows_bottom = rows_top + len(t.tracks) * row_h
        # Grid.
        v = 0.0
        while v <= x_max + 1e-9:
            cv.vline(x_of(v), y, rows_bottom, GRID)
            v += step
        # Kernel lane.
        cv.text(16, y + (kernel_h - GLYPH_H * S) // 2 + 2, "kernels", MUTED, S)
        kernels = t.kernels()
        bars = [(x_of(lo - t.t0), max(x_of(lo - t.t0) + 1, x_of(hi - t.t0))) for _, lo, hi in kernels]
        for i, (x0, x1) in enumerate(bars):
            cv.rect(x0, y + 2, x1, y + kernel_h - 2, KERNEL_FILL[i % 2])
        # Labels: inside the bar if they fit, else beside or over it (right, then left) where
        # they cover no other bar or label, else truncated inside.
        placed = []  # (x0, x1) of drawn labels

        def free(a, b, own):
            spans = [bx for j, bx in enumerate(bars) if j != own] + placed
            return a >= left and b <= width - 4 and all(b <= s0 or a >= s1 for s0, s1 in spans)

        ty = y + (kernel_h - 7 * S) // 2
        for i, ((name, _, _), (x0, x1)) in enumerate(zip(kernels, bars)):
            w = text_width(name, S)
            candidates = ((x0 + 4, w <= x1 - x0 - 8), (x1 + 6, True), (x0 + 4, True),
                          (width - 4 - w, True), (x0 - 6 - w, True))
            for tx, fits in candidates:
                if fits and free(tx, tx + w, i) and all(tx + w <= a or tx >= b for a, b in placed):
                    cv.text(round(tx), ty, name, INK, S)
                    placed.append((tx, tx + w))
                    break
            else:
                label = name
                while label and text_width(label + "~", S) > x1 - x0 - 8:
                    label = label[:-1]
                if label:
                    cv.text(round(x0 + 4), ty, label + "~", INK, S)
                    placed.append((x0 + 4, x0 + 4 + text_width(label + "~", S)))
        # Track rows.
        index = {k: i for i, k in enumerate(t.tracks)}
        dev_index = {d: i for i, d in enumerate(sorted(t.devices, key=_sort_key))}
        for k, i in index.items():
            ry = rows_top + i * row_h
            band = BAND[dev_index[k[0]] % 2]
            cv.rect(left, ry, left + plot_w, ry + row_h, band)
            v = 0.0
            while v <= x_max + 1e-9:
                cv.vline(x_of(v), ry, ry + row_h, GRID)
                v += step
            cv.text(16, ry + (row_h - 7 * S) // 2, t.track_label(k), INK, S)
            if i > 0 and k[0] != t.tracks[i - 1][0]:
                cv.hline(8, left + plot_w, ry, "#9a9a9a")  # device boundary
        pad = max(1, row_h // 8)

        def box(ev, y0, y1, color, min_w=1):
            x0 = x_of(ev[4] - t.t0)
            x1 = max(x0 + min_w, x_of(ev[4] + ev[5] - t.t0))
            cv.rect(round(x0), y0, max(round(x0) + min_w, round(x1)), y1, color)

        layers = (("wg",), ("wait",), ("compute", "put", "store", "link"), ("signal",))
        for layer in layers:
            for ev in t.events:
                cat = ev[2] if ev[2] in SPECIAL else "compute"
                if cat not in layer:
                    continue
                ry = rows_top + index[(ev[0], ev[1])] * row_h
                if cat == "wg":
                    box(ev, ry + row_h - pad - 3, ry + row_h - pad, WG)
                elif cat == "wait":
                    box(ev, ry + pad, ry + row_h - pad - 4, WAIT)
                elif cat == "signal":
                    box(ev, ry + 1, ry + row_h // 2, SIGNAL, min_w=2)
                elif cat in ("put", "store", "link"):
                    box(ev, ry + pad, ry + row_h - pad - 4, PUT)
                else:
                    box(ev, ry + pad, ry + row_h - pad - 4, shade[ev[2]])
        cv.frame(left, rows_top, left + plot_w + 1, rows_bottom + 1, "#909090")
        # Axis.
        ay = rows_bottom + 4
        v = 0.0
        while v <= x_max + 1e-9:
            x = x_of(v)
            cv.vline(x, rows_bottom, ay + 2, INK)
            s = fmt_time(round(v, 6))
            tx = min(max(x - text_width(s, S) / 2, left - 8), width - right - text_width(s, S))
            cv.text(round(tx), ay + 4, s, INK, S)
            v += step
        axis = "time since the trace's first event (\u00b5s)"
        cv.text(left + (plot_w - text_width(axis, S)) // 2, ay + 4 + line_h, axis, MUTED, S)
        y = y_panel + ph

    data = cv.png()
    try:
        with open(out_path, "wb") as f:
            f.write(data)
    except OSError as e:
        print(f"{PROG}: error: cannot write '{out_path}': {e.strerror or e}", file=sys.stderr)
        return 1
    print(f"{PROG}: wrote {out_path} ({width}x{height}, {len(data) // 1024} KiB)")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog=PROG, description="Render fusedcoll emulator traces (FUSEDCOLL_TRACE) as a timeline "
        "PNG: one panel per file, one row per device compute unit, a shared time axis.")
    ap.add_argument("traces", nargs="+", metavar="TRACE.json", help="Chrome/Perfetto JSON trace")
    ap.add_argument("-o", "--output", required=True, metavar="OUT.png", help="PNG to write")
    ap.add_argument("-l", "--label", action="append", default=[], metavar="TEXT",
                    help="panel title, once per trace in order (default: the file name)")
    ap.add_argument("--title", default="", help="figure title")
    ap.add_argument("--width", type=int, default=1400, help="image width in pixels (1400)")
    ap.add_argument("--row-height", type=int, default=22, help="pixels per track (22)")
    a = ap.parse_intermixed_args(argv)
    if len(a.label) > len(a.traces):
        ap.error(f"{len(a.label)} labels given for {len(a.traces)} traces")
    if not 8 <= a.row_height <= 200:
        ap.error("--row-height must be in [8, 200]")
    if not 400 <= a.width <= 20000:
        ap.error("--width must be in [400, 20000]")
    labels = a.label + [os.path.basename(p) for p in a.traces[len(a.label):]]
    try:
        traces = [Trace(p, lab) for p, lab in zip(a.traces, labels)]
        return render(traces, a.output, a.title, a.width, a.row_height)
    except InputError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
