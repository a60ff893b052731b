//! Flame graphs as standalone SVG: [`render`] draws one profile,
//! [`render_diff`] draws how a profile changed against a base.
//!
//! Stacks merge by the path of their function names, root first, so the
//! same code path sampled in several processes (or threads of one binary)
//! reads as one frame; [`Options::roots`] splits them again by host,
//! process or thread (see [`Profile::rooted`]). Siblings
//! are sorted by name, which is what makes two renders of equal profiles
//! byte-identical whatever order their stacks came in.
//!
//! The renderer is our own rather than the `inferno` crate, whose CDDL
//! licence we do not want in an Apache-2.0 agent.
//!
//! The SVG is complete without script: every frame has a `<title>`
//! tooltip and the static layout is the whole, unzoomed graph. A small
//! inline script adds click-to-zoom and a details line; it works from the
//! `data-*` attributes of each `<g class="frame">` (position and width in
//! samples, depth, name), which are also what tests look frames up by.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;

use crate::model::{Profile, Root};

/// Options for a rendered flame graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// The heading drawn at the top of the graph.
    pub title: String,
    /// The width of the SVG in pixels (default 1200).
    pub width: u32,
    /// Frames narrower than this many pixels are not drawn, nor is
    /// anything above them (default 0.1). They are left out of the SVG
    /// rather than hidden, which keeps graphs of large profiles small;
    /// zooming cannot bring them back.
    pub min_width_px: f64,
    /// Frames between `all` and the stacks, outermost first: with
    /// `[Root::Process, Root::Thread]` each process is a frame labelled
    /// `name (pid)` and each of its threads one labelled with its name
    /// (default none: stacks of every process merge).
    pub roots: Vec<Root>,
    /// Where the root is drawn (default [`Layout::Flame`], at the bottom).
    pub layout: Layout,
}

/// Which way a graph grows from its root.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Layout {
    /// The root (`all`) at the bottom and callees above their callers:
    /// the classic flame graph of flamegraph.pl.
    #[default]
    Flame,
    /// The root at the top and callees below their callers, as Pyroscope
    /// and Elastic draw it. A browser shows an SVG from its top, so the
    /// first screen holds the root and the widest frames, however deep the
    /// deepest stack; the details line sits under the title, in view.
    Icicle,
}

impl std::str::FromStr for Layout {
    type Err = String;

    fn from_str(s: &str) -> Result<Layout, String> {
        match s {
            "flame" => Ok(Layout::Flame),
            "icicle" => Ok(Layout::Icicle),
            _ => Err(format!(
                "{s:?}: icicle (the root at the top) or flame (the root at the bottom)"
            )),
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            title: "CPU flame graph".to_owned(),
            width: 1200,
            min_width_px: 0.1,
            roots: Vec::new(),
            layout: Layout::Flame,
        }
    }
}

/// A flame graph of `profile`: widths are sample counts, the root an
/// `all` frame with every sample, at the bottom with the leaves on top
/// (the classic orientation) or, with [`Layout::Icicle`], the other way
/// up.
///
/// Frames are coloured from a hash of their function name, so a function
/// keeps its colour from one graph to the next: warm colours for user
/// code, brown for the kernel, green for JIT code.
pub fn render(profile: &Profile, options: &Options) -> String {
    let rooted = rooted(profile, &options.roots);
    let tree = Tree::build(&rooted);
    draw(&tree, options, Paint::Regular)
}

fn rooted<'a>(profile: &'a Profile, roots: &[Root]) -> Cow<'a, Profile> {
    if roots.is_empty() {
        Cow::Borrowed(profile)
    } else {
        Cow::Owned(profile.rooted(roots))
    }
}

/// A differential flame graph: the shape and widths are those of `new`;
/// each frame is coloured by how its share of all samples changed from
/// `base` to `new`.
///
/// A frame's share is its inclusive sample count (its own and everything
/// above it) over the graph's total, in each profile, so a change in how
/// much was sampled overall does not colour everything. Red means the
/// share grew, blue that it shrank, near white that it held; the most
/// changed frame of the graph gets the deepest colour. Paths sampled only
/// in `base` have no width in `new` and so are not drawn.
pub fn render_diff(base: &Profile, new: &Profile, options: &Options) -> String {
    let (base, new) = (rooted(base, &options.roots), rooted(new, &options.roots));
    let mut tree = Tree::build(&new);
    let base_total = tree.add_base(&base);
    draw(&tree, options, Paint::Diff { base_total })
}

/// Left and right margin, in pixels.
const PAD: f64 = 10.0;
/// Where the lowest level of frames ends above the bottom of the SVG,
/// leaving room for the details line.
const BOTTOM: f64 = 34.0;
/// Where the highest level of frames starts, below the title.
const TOP: f64 = 44.0;
/// In an icicle, where the root starts: below the title and the details
/// line, which moves up from the bottom to stay on the first screen.
const ICICLE_TOP: f64 = 48.0;
/// In an icicle, the room below the deepest level.
const ICICLE_BOTTOM: f64 = 10.0;
/// In an icicle, the baseline of the details line.
const ICICLE_DETAILS_Y: f64 = 40.0;
/// The height of one level of frames; rectangles are a pixel shorter so
/// that levels stay apart.
const FRAME_HEIGHT: f64 = 16.0;
/// The baseline of a label below the top of its frame.
const TEXT_DY: f64 = 11.5;
/// The room a label leaves on each side of its frame.
const TEXT_PAD: f64 = 3.0;
/// The approximate advance of one character of 12px monospace text,
/// which is all that truncation needs: a label that ends a little short
/// of its box is better than measuring text we cannot measure here.
const CHAR_WIDTH: f64 = 7.0;

/// What a node of the merged tree stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind<'a> {
    /// The root, with every sample.
    All,
    /// A function, and the module it came from.
    Function { module: &'a str },
}

/// One frame path of the merged tree.
#[derive(Debug)]
struct Node<'a> {
    /// Index into [`Tree::labels`].
    label: u32,
    kind: Kind<'a>,
    /// Samples of this path and everything above it, in the drawn profile.
    total: u64,
    /// The same in the base profile of a diff (0 otherwise).
    base: u64,
    /// Sorted by label once the tree is built.
    children: Vec<u32>,
}

/// Stacks merged into a tree of frame paths, root (`all`) at index 0.
#[derive(Debug)]
struct Tree<'a> {
    nodes: Vec<Node<'a>>,
    /// Interned labels, so that merging compares integers, not strings.
    labels: Vec<Cow<'a, str>>,
    label_ids: HashMap<Cow<'a, str>, u32>,
    /// (parent node, child label) to child node.
    edges: HashMap<(u32, u32), u32>,
}

impl<'a> Tree<'a> {
    fn build(profile: &'a Profile) -> Self {
        let mut tree = Tree {
            nodes: Vec::new(),
            labels: Vec::new(),
            label_ids: HashMap::new(),
            edges: HashMap::new(),
        };
        let all = tree.intern(Cow::Borrowed("all"));
        tree.nodes.push(Node {
            label: all,
            kind: Kind::All,
            total: 0,
            base: 0,
            children: Vec::new(),
        });
        // Interned once per function rather than per frame.
        let functions: Vec<u32> = profile
            .functions
            .iter()
            .map(|f| tree.intern(Cow::Borrowed(f.name.as_str())))
            .collect();
        for stack in &profile.stacks {
            let count = stack.count;
            if count == 0 {
                continue;
            }
            let mut node = 0;
            tree.nodes[0].total += count;
            for &frame in &stack.frames {
                let module = profile.functions[frame as usize].module.as_str();
                node = tree.child(node, functions[frame as usize], Kind::Function { module });
                tree.nodes[node as usize].total += count;
            }
        }
        // Children are sorted after merging, not kept sorted while
        // inserting, which would cost a search per frame.
        for i in 0..tree.nodes.len() {
            let mut children = std::mem::take(&mut tree.nodes[i].children);
            children.sort_by(|&a, &b| {
                let a = &tree.labels[tree.nodes[a as usize].label as usize];
                let b = &tree.labels[tree.nodes[b as usize].label as usize];
                a.cmp(b)
            });
            tree.nodes[i].children = children;
        }
        tree
    }

    fn intern(&mut self, label: Cow<'a, str>) -> u32 {
        if let Some(&id) = self.label_ids.get(label.as_ref()) {
            return id;
        }
        let id = self.labels.len() as u32;
        self.labels.push(label.clone());
        self.label_ids.insert(label, id);
        id
    }

    /// The child of `parent` labelled `label`, created if new.
    fn child(&mut self, parent: u32, label: u32, kind: Kind<'a>) -> u32 {
        if let Some(&node) = self.edges.get(&(parent, label)) {
            // Functions of one name in different modules merge (the path
            // is by name); the smallest module is the one shown, so the
            // choice does not depend on the order of the stacks.
            if let (Kind::Function { module: old }, Kind::Function { module: new }) =
                (&mut self.nodes[node as usize].kind, kind)
            {
                if new < *old {
                    *old = new;
                }
            }
            return node;
        }
        let node = self.nodes.len() as u32;
        self.nodes.push(Node {
            label,
            kind,
            total: 0,
            base: 0,
            children: Vec::new(),
        });
        self.nodes[parent as usize].children.push(node);
        self.edges.insert((parent, label), node);
        node
    }

    /// Adds the samples of `base` to the paths it shares with the tree,
    /// and returns its total. Paths the tree lacks are not added: a diff
    /// draws only what `new` sampled.
    fn add_base(&mut self, base: &Profile) -> u64 {
        // A name the tree never interned cannot be on any of its paths.
        let functions: Vec<Option<u32>> = base
            .functions
            .iter()
            .map(|f| self.label_ids.get(f.name.as_str()).copied())
            .collect();
        let mut total = 0;
        for stack in &base.stacks {
            let count = stack.count;
            total += count;
            self.nodes[0].base += count;
            let mut node = 0;
            for label in stack.frames.iter().map(|&f| functions[f as usize]) {
                match label.and_then(|l| self.edges.get(&(node, l))) {
                    Some(&next) => node = next,
                    None => break,
                }
                self.nodes[node as usize].base += count;
            }
        }
        total
    }

    fn label(&self, node: &Node) -> &str {
        &self.labels[node.label as usize]
    }
}

/// How frames are coloured and what their tooltips say.
#[derive(Debug, Clone, Copy)]
enum Paint {
    Regular,
    Diff { base_total: u64 },
}

/// A frame placed in the graph.
#[derive(Debug, Clone, Copy)]
struct Placed {
    node: u32,
    depth: u32,
    /// Samples left of the frame.
    x: u64,
}

fn draw(tree: &Tree, options: &Options, paint: Paint) -> String {
    let width = f64::from(options.width).max(2.0 * PAD + 1.0);
    let graph_width = width - 2.0 * PAD;
    let total = tree.nodes[0].total;
    let mut out = String::new();
    if total == 0 {
        let height = TOP + FRAME_HEIGHT + BOTTOM;
        header(&mut out, options, width, height);
        let _ = writeln!(
            out,
            r#"<text class="empty" x="{:.2}" y="{:.2}" text-anchor="middle">no samples</text>"#,
            width / 2.0,
            TOP + TEXT_DY,
        );
        out.push_str("</svg>\n");
        return out;
    }
    let scale = graph_width / total as f64;
    let placed = layout(tree, scale, options.min_width_px);
    let levels = placed.iter().map(|p| p.depth).max().unwrap_or(0) + 1;
    let graph_height = f64::from(levels) * FRAME_HEIGHT;
    let (height, details_y) = match options.layout {
        Layout::Flame => (
            TOP + graph_height + BOTTOM,
            TOP + graph_height + BOTTOM - 12.0,
        ),
        Layout::Icicle => (ICICLE_TOP + graph_height + ICICLE_BOTTOM, ICICLE_DETAILS_Y),
    };
    // The deepest colour goes to the most changed frame actually drawn.
    let max_delta = match paint {
        Paint::Regular => 0.0,
        Paint::Diff { base_total } => placed
            .iter()
            .map(|p| delta(&tree.nodes[p.node as usize], total, base_total).abs())
            .fold(0.0, f64::max),
    };

    out.reserve(placed.len() * 320 + SCRIPT.len() + 1024);
    header(&mut out, options, width, height);
    out.push_str("<g class=\"frames\">\n");
    for p in &placed {
        let node = &tree.nodes[p.node as usize];
        let name = tree.label(node);
        let x = PAD + p.x as f64 * scale;
        let w = node.total as f64 * scale;
        let y = match options.layout {
            Layout::Flame => TOP + f64::from(levels - 1 - p.depth) * FRAME_HEIGHT,
            Layout::Icicle => ICICLE_TOP + f64::from(p.depth) * FRAME_HEIGHT,
        };
        let (fill, tooltip) = match paint {
            Paint::Regular => (colour(name, node.kind), tooltip(name, node, total)),
            Paint::Diff { base_total } => {
                let d = delta(node, total, base_total);
                (
                    diff_colour(d, max_delta),
                    diff_tooltip(name, node, total, base_total),
                )
            }
        };
        out.push_str("<g class=\"frame\" data-name=\"");
        escape_into(&mut out, name);
        let _ = write!(
            out,
            "\" data-x=\"{}\" data-w=\"{}\" data-depth=\"{}\"><title>",
            p.x, node.total, p.depth
        );
        escape_into(&mut out, &tooltip);
        let _ = write!(
            out,
            "</title><rect x=\"{x:.2}\" y=\"{y:.2}\" width=\"{w:.2}\" height=\"{:.2}\" fill=\"rgb({},{},{})\"/>",
            FRAME_HEIGHT - 1.0,
            fill[0],
            fill[1],
            fill[2],
        );
        if let Some(label) = fit_label(name, w) {
            let _ = write!(
                out,
                "<text x=\"{:.2}\" y=\"{:.2}\">",
                x + TEXT_PAD,
                y + TEXT_DY
            );
            escape_into(&mut out, &label);
            out.push_str("</text>");
        }
        out.push_str("</g>\n");
    }
    out.push_str("</g>\n");
    let _ = writeln!(
        out,
        r#"<text class="details" x="{PAD:.2}" y="{details_y:.2}"> </text>"#,
    );
    out.push_str("<script type=\"text/ecmascript\"><![CDATA[\n");
    out.push_str(SCRIPT);
    out.push_str("]]></script>\n</svg>\n");
    out
}

/// The SVG up to its frames: root element, style, background, title and
/// the zoom reset button.
fn header(out: &mut String, options: &Options, width: f64, height: f64) {
    let _ = write!(
        out,
        concat!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n",
            "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" class=\"flamegraph\" data-layout=\"{layout}\" ",
            "width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" ",
            "font-family=\"monospace\" font-size=\"12\" ",
            "data-graph-x=\"{pad}\" data-graph-width=\"{gw}\" ",
            "data-char-width=\"{cw}\" data-text-pad=\"{tp}\" data-text-dy=\"{dy}\">\n",
            "<style>.frame{{cursor:pointer}}.frame:hover rect{{stroke:#000;stroke-width:0.5}}",
            ".frame.ancestor{{opacity:0.6}}.reset{{cursor:pointer;display:none}}</style>\n",
            "<rect class=\"background\" x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\" fill=\"#ffffff\"/>\n",
            "<text class=\"title\" x=\"{cx}\" y=\"24\" text-anchor=\"middle\" font-size=\"17\">",
        ),
        w = width,
        h = height,
        layout = match options.layout {
            Layout::Flame => "flame",
            Layout::Icicle => "icicle",
        },
        pad = PAD,
        gw = width - 2.0 * PAD,
        cw = CHAR_WIDTH,
        tp = TEXT_PAD,
        dy = TEXT_DY,
        cx = width / 2.0,
    );
    escape_into(out, &options.title);
    let _ = writeln!(
        out,
        "</text>\n<text class=\"reset\" x=\"{PAD}\" y=\"24\">Reset zoom</text>"
    );
}

/// The frames to draw, parents before children, each with its depth and
/// its offset in samples. Iterative, so that a stack thousands of frames
/// deep cannot overflow the thread's stack.
fn layout(tree: &Tree, scale: f64, min_width_px: f64) -> Vec<Placed> {
    let mut placed = Vec::new();
    let mut todo = vec![Placed {
        node: 0,
        depth: 0,
        x: 0,
    }];
    let mut children = Vec::new();
    while let Some(p) = todo.pop() {
        let node = &tree.nodes[p.node as usize];
        // Children are never wider than their parent, so skipping a
        // narrow frame skips its whole subtree.
        if p.node != 0 && (node.total as f64 * scale) < min_width_px {
            continue;
        }
        placed.push(p);
        let mut x = p.x;
        children.clear();
        for &child in &node.children {
            children.push(Placed {
                node: child,
                depth: p.depth + 1,
                x,
            });
            x += tree.nodes[child as usize].total;
        }
        // Reversed, so that siblings come off the stack in name order.
        todo.extend(children.iter().rev());
    }
    placed
}

/// The change in a node's share of all samples from base to new; a share
/// is of the total of its own profile, so an empty base gives every node a
/// share of 0 there.
fn delta(node: &Node, total: u64, base_total: u64) -> f64 {
    share(node.total, total) - share(node.base, base_total)
}

fn share(samples: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        samples as f64 / total as f64
    }
}

fn tooltip(name: &str, node: &Node, total: u64) -> String {
    let samples = if node.total == 1 { "sample" } else { "samples" };
    let percent = 100.0 * share(node.total, total);
    match node.kind {
        Kind::Function { module } if !module.is_empty() => {
            format!(
                "{name} ({module}) — {} {samples}, {percent:.2}%",
                node.total
            )
        }
        _ => format!("{name} — {} {samples}, {percent:.2}%", node.total),
    }
}

fn diff_tooltip(name: &str, node: &Node, total: u64, base_total: u64) -> String {
    let new = 100.0 * share(node.total, total);
    let base = 100.0 * share(node.base, base_total);
    let change = new - base;
    // A change that rounds to nothing would otherwise print as "+0.00" or
    // "-0.00", as if it had a direction.
    let change = if (change * 100.0).round() == 0.0 {
        "±0.00".to_owned()
    } else {
        format!("{change:+.2}")
    };
    format!("{name} — base {base:.2}% → new {new:.2}% ({change} points)")
}

/// A frame's colour: a hash of the function name picks it within its
/// module's family, so a function keeps its colour across graphs and runs
/// while neighbours usually differ.
fn colour(name: &str, kind: Kind) -> [u8; 3] {
    let h = hash(name);
    // Three independent fractions in [0, 1] from one hash.
    let u = |i: u32| ((h >> (i * 16)) & 0xffff) as f64 / 65535.0;
    match kind {
        // The structural frames are not code: a neutral grey-blue keeps
        // them from drawing the eye.
        Kind::All
        | Kind::Function {
            module: "[host]" | "[process]" | "[thread]",
        } => hsl(215.0, 0.15, 0.78 + 0.06 * u(0)),
        Kind::Function { module: "[kernel]" } => {
            hsl(22.0 + 14.0 * u(0), 0.35 + 0.15 * u(1), 0.45 + 0.1 * u(2))
        }
        Kind::Function { module: "[jit]" } => {
            hsl(85.0 + 45.0 * u(0), 0.45 + 0.2 * u(1), 0.5 + 0.1 * u(2))
        }
        // Red through orange to yellow, saturated and light, so black
        // labels stay readable.
        Kind::Function { .. } => hsl(55.0 * u(0), 0.8 + 0.15 * u(1), 0.55 + 0.1 * u(2)),
    }
}

/// A diff frame's colour: near white for no change, towards red for a
/// grown share and blue for a shrunk one, in proportion to the graph's
/// largest change.
fn diff_colour(delta: f64, max_delta: f64) -> [u8; 3] {
    const NEUTRAL: f64 = 240.0;
    // Shares are ratios of counts: anything this small is rounding, not a
    // change, and must not be stretched to full colour when it is the
    // largest "change" of an unchanged graph.
    if max_delta < 1e-12 || delta.abs() < 1e-12 {
        return [NEUTRAL as u8; 3];
    }
    let t = (delta.abs() / max_delta).min(1.0);
    let strong = (NEUTRAL + 15.0 * t).round() as u8;
    let weak = (NEUTRAL - 170.0 * t).round() as u8;
    if delta > 0.0 {
        [strong, weak, weak]
    } else {
        [weak, weak, strong]
    }
}

/// HSL (hue in degrees, saturation and lightness in [0, 1]) to RGB, which
/// makes "a warm hue, vivid but light" easy to say.
fn hsl(hue: f64, saturation: f64, lightness: f64) -> [u8; 3] {
    let chroma = (1.0 - (2.0 * lightness - 1.0).abs()) * saturation;
    let sector = (hue.rem_euclid(360.0)) / 60.0;
    let second = chroma * (1.0 - (sector % 2.0 - 1.0).abs());
    let (r, g, b) = match sector as u32 {
        0 => (chroma, second, 0.0),
        1 => (second, chroma, 0.0),
        2 => (0.0, chroma, second),
        3 => (0.0, second, chroma),
        4 => (second, 0.0, chroma),
        _ => (chroma, 0.0, second),
    };
    let m = lightness - chroma / 2.0;
    let byte = |v: f64| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    [byte(r), byte(g), byte(b)]
}

/// FNV-1a over the name, then a finaliser that spreads its bits: std's
/// hashers are seeded per process, and colours must not change between
/// runs.
fn hash(name: &str) -> u64 {
    // FNV's low bits change little between similar names; mixing the high
    // bits down gives similar names visibly different colours.
    let mut h = fnv1a(name.as_bytes());
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The label that fits a frame `width` pixels wide: the whole name, or
/// its start and an ellipsis, or nothing when fewer than 3 characters fit.
fn fit_label(name: &str, width: f64) -> Option<Cow<'_, str>> {
    let fits = ((width - 2.0 * TEXT_PAD) / CHAR_WIDTH).floor();
    // A NaN width (from a NaN or infinite scale) has no label either.
    if fits.is_nan() || fits < 3.0 {
        return None;
    }
    let fits = fits.min(1e6) as usize;
    match name.char_indices().nth(fits) {
        None => Some(Cow::Borrowed(name)),
        Some(_) => {
            let cut = name
                .char_indices()
                .nth(fits - 1)
                .map_or(name.len(), |(i, _)| i);
            Some(Cow::Owned(format!("{}…", &name[..cut])))
        }
    }
}

/// Appends `s` escaped for XML text and attribute values. Characters XML
/// 1.0 cannot carry at all (most control characters) become U+FFFD, so a
/// strange symbol name cannot make the whole document unreadable.
fn escape_into(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' => out.push(c),
            c if c >= '\u{10000}' => out.push(c),
            _ => out.push('\u{FFFD}'),
        }
    }
}

/// Zoom and the details line, in plain JS inside the SVG. It must not
/// contain `]]>`, which would end the CDATA section it is written into.
const SCRIPT: &str = r#"// Click a frame to zoom into it: its subtree spans the full width, its
// ancestors stay (dimmed) at full width, the rest hides. Click "all" or
// "Reset zoom" to go back. Hovering a frame shows its tooltip below the
// graph. Frames carry their position in samples (data-x, data-w) and their
// depth, so a zoom is only a rescale from samples to pixels.
(function () {
  "use strict";
  var script = document.currentScript;
  var svg = (script && script.closest("svg")) || document.documentElement;
  function conf(key) { return Number(svg.getAttribute("data-" + key)); }
  var left = conf("graph-x"), width = conf("graph-width");
  var charWidth = conf("char-width"), textPad = conf("text-pad");
  var textDy = conf("text-dy");
  var frames = Array.prototype.slice.call(svg.querySelectorAll("g.frame"));
  var details = svg.querySelector(".details");
  var reset = svg.querySelector(".reset");
  var root = frames.filter(function (g) {
    return g.getAttribute("data-depth") === "0";
  })[0];
  if (!root) return;

  function num(g, key) { return Number(g.getAttribute("data-" + key)); }

  // The renderer's rule, so labels read the same before and after a zoom:
  // cut with an ellipsis to fit, none when fewer than 3 characters fit.
  function fit(name, px) {
    var chars = Array.from(name);
    var n = Math.floor((px - 2 * textPad) / charWidth);
    if (n < 3) return "";
    if (chars.length <= n) return name;
    return chars.slice(0, n - 1).join("") + "\u2026";
  }

  // Draws frame g from x to x + w pixels.
  function place(g, x, w) {
    var rect = g.querySelector("rect");
    var text = g.querySelector("text");
    var label = fit(g.getAttribute("data-name"), w);
    rect.setAttribute("x", x.toFixed(2));
    rect.setAttribute("width", w.toFixed(2));
    if (!text && label) {
      // Frames too narrow for a label when rendered have no text element.
      text = document.createElementNS("http://www.w3.org/2000/svg", "text");
      text.setAttribute("y", (Number(rect.getAttribute("y")) + textDy).toFixed(2));
      g.appendChild(text);
    }
    if (text) {
      text.setAttribute("x", (x + textPad).toFixed(2));
      text.textContent = label;
    }
  }

  function zoom(target) {
    var tx = num(target, "x"), tw = num(target, "w"), td = num(target, "depth");
    frames.forEach(function (g) {
      var x = num(g, "x"), w = num(g, "w"), d = num(g, "depth");
      // Frames of one depth never overlap, so at each shallower depth the
      // one frame covering the target's samples is its ancestor, and a
      // deeper frame within the target's samples is in its subtree.
      var ancestor = d < td && x <= tx && x + w >= tx + tw;
      var inside = d >= td && x >= tx && x + w <= tx + tw;
      g.style.display = ancestor || inside ? "" : "none";
      g.classList.toggle("ancestor", ancestor);
      if (ancestor) place(g, left, width);
      else if (inside) place(g, left + (x - tx) / tw * width, w / tw * width);
    });
    // The stylesheet hides the button; an inline style shows it.
    reset.style.display = target === root ? "" : "inline";
  }

  function frameOf(event) {
    return event.target.closest ? event.target.closest("g.frame") : null;
  }
  svg.addEventListener("click", function (event) {
    if (event.target.closest && event.target.closest(".reset")) {
      zoom(root);
      return;
    }
    var g = frameOf(event);
    if (g) zoom(g);
  });
  svg.addEventListener("mouseover", function (event) {
    var g = frameOf(event);
    if (g) details.textContent = g.querySelector("title").textContent;
  });
  svg.addEventListener("mouseout", function (event) {
    if (frameOf(event)) details.textContent = " ";
  });
})();
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Function, Process, ProfileBuilder};
    use proptest::prelude::*;

    fn function(name: &str, module: &str) -> Function {
        Function {
            name: name.to_owned(),
            module: module.to_owned(),
        }
    }

    fn process(pid: u32, name: &str) -> Process {
        Process {
            pid,
            name: name.to_owned(),
            container: String::new(),
            ..Default::default()
        }
    }

    /// A profile of `(process, "root;…;leaf", count)` stacks, every
    /// function in module `app`.
    fn profile_in(stacks: &[(&Process, &str, u64)]) -> Profile {
        let mut builder = ProfileBuilder::new(99, 0, 1_000_000_000);
        for &(process, path, count) in stacks {
            let frames: Vec<Function> = path.split(';').map(|n| function(n, "app")).collect();
            builder.add(process, &frames, count);
        }
        builder.finish()
    }

    fn profile(stacks: &[(&str, u64)]) -> Profile {
        let p = process(1, "app");
        let stacks: Vec<_> = stacks.iter().map(|&(s, c)| (&p, s, c)).collect();
        profile_in(&stacks)
    }

    fn hot_and_cold() -> Profile {
        profile(&[("main;work;hot", 70), ("main;work;cold", 30)])
    }

    /// A frame as read back from the SVG.
    #[derive(Debug)]
    struct Frame {
        name: String,
        x: u64,
        w: u64,
        depth: u32,
        title: String,
        label: Option<String>,
        rect_x: f64,
        rect_y: f64,
        rect_w: f64,
        fill: [u8; 3],
    }

    fn attr<'s>(s: &'s str, name: &str) -> &'s str {
        let key = format!(" {name}=\"");
        let start = s.find(&key).unwrap_or_else(|| panic!("no {name} in {s}")) + key.len();
        let end = s[start..].find('"').unwrap();
        &s[start..start + end]
    }

    fn between<'s>(s: &'s str, open: &str, close: &str) -> Option<&'s str> {
        let start = s.find(open)? + open.len();
        let end = s[start..].find(close)?;
        Some(&s[start..start + end])
    }

    fn unescape(s: &str) -> String {
        s.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&amp;", "&")
    }

    fn parse(svg: &str) -> Vec<Frame> {
        svg.split("<g class=\"frame\"")
            .skip(1)
            .map(|chunk| {
                let g = &chunk[..chunk.find("</g>").unwrap()];
                let rect = &g[g.find("<rect").unwrap()..];
                let fill = attr(rect, "fill");
                let rgb: Vec<u8> = fill
                    .trim_start_matches("rgb(")
                    .trim_end_matches(')')
                    .split(',')
                    .map(|v| v.parse().unwrap())
                    .collect();
                Frame {
                    name: unescape(attr(g, "data-name")),
                    x: attr(g, "data-x").parse().unwrap(),
                    w: attr(g, "data-w").parse().unwrap(),
                    depth: attr(g, "data-depth").parse().unwrap(),
                    title: unescape(between(g, "<title>", "</title>").unwrap()),
                    label: g
                        .find("<text")
                        .map(|i| unescape(between(&g[i..], ">", "</text>").unwrap())),
                    rect_x: attr(rect, "x").parse().unwrap(),
                    rect_y: attr(rect, "y").parse().unwrap(),
                    rect_w: attr(rect, "width").parse().unwrap(),
                    fill: [rgb[0], rgb[1], rgb[2]],
                }
            })
            .collect()
    }

    fn find<'f>(frames: &'f [Frame], name: &str) -> &'f Frame {
        frames
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("no frame {name}"))
    }

    /// The frame one level down whose samples cover `child`'s start.
    fn parent_of<'f>(frames: &'f [Frame], child: &Frame) -> &'f Frame {
        frames
            .iter()
            .find(|f| f.depth + 1 == child.depth && f.x <= child.x && child.x < f.x + f.w)
            .unwrap_or_else(|| panic!("no parent for {child:?}"))
    }

    #[test]
    fn a_hot_leaf_is_as_wide_as_its_share_of_all_samples() {
        let svg = render(&hot_and_cold(), &Options::default());
        let frames = parse(&svg);
        let all = find(&frames, "all");
        let hot = find(&frames, "hot");
        let cold = find(&frames, "cold");
        assert_eq!((all.w, hot.w, cold.w), (100, 70, 30));
        assert!(
            (hot.rect_w - 0.7 * all.rect_w).abs() <= 1.0,
            "{hot:?} {all:?}"
        );
        assert!((cold.rect_w - 0.3 * all.rect_w).abs() <= 1.0);
        assert!((all.rect_w - 1180.0).abs() <= 1.0);
    }

    #[test]
    fn children_sit_within_their_parent_one_level_up() {
        let svg = render(&hot_and_cold(), &Options::default());
        let frames = parse(&svg);
        for (child, parent) in [
            ("main", "all"),
            ("work", "main"),
            ("hot", "work"),
            ("cold", "work"),
        ] {
            let (c, p) = (find(&frames, child), find(&frames, parent));
            assert_eq!(c.depth, p.depth + 1);
            assert_eq!(c.rect_y, p.rect_y - FRAME_HEIGHT, "{child} above {parent}");
            assert!(c.rect_x >= p.rect_x - 0.01);
            assert!(c.rect_x + c.rect_w <= p.rect_x + p.rect_w + 0.01);
        }
    }

    #[test]
    fn the_root_is_at_the_bottom_and_leaves_on_top() {
        let svg = render(&hot_and_cold(), &Options::default());
        let frames = parse(&svg);
        let lowest = frames.iter().map(|f| f.rect_y).fold(f64::MIN, f64::max);
        assert_eq!(find(&frames, "all").rect_y, lowest);
        assert!(find(&frames, "hot").rect_y < find(&frames, "main").rect_y);
    }

    #[test]
    fn siblings_are_sorted_by_name() {
        let svg = render(
            &profile(&[("main;zeta", 5), ("main;alpha", 1), ("main;mu", 3)]),
            &Options::default(),
        );
        let frames = parse(&svg);
        let (a, m, z) = (
            find(&frames, "alpha"),
            find(&frames, "mu"),
            find(&frames, "zeta"),
        );
        assert_eq!((a.x, m.x, z.x), (0, 1, 4));
        assert!(a.rect_x < m.rect_x && m.rect_x < z.rect_x);
    }

    #[test]
    fn equal_stacks_in_any_order_render_identically() {
        let one = profile(&[("main;a;b", 3), ("main;c", 2), ("other", 1)]);
        let two = profile(&[("other", 1), ("main;c", 2), ("main;a;b", 3)]);
        assert_ne!(one, two, "interned in a different order");
        assert_eq!(
            render(&one, &Options::default()),
            render(&two, &Options::default())
        );
    }

    #[test]
    fn stacks_of_different_processes_merge_unless_rooted_by_process() {
        let (a, b) = (process(10, "web"), process(20, "db"));
        let p = profile_in(&[(&a, "main;serve", 4), (&b, "main;serve", 6)]);
        let merged = parse(&render(&p, &Options::default()));
        assert_eq!(merged.iter().filter(|f| f.name == "serve").count(), 1);
        assert_eq!(find(&merged, "serve").w, 10);

        let options = Options {
            roots: vec![Root::Process],
            ..Options::default()
        };
        let split = parse(&render(&p, &options));
        let web = find(&split, "web (10)");
        let db = find(&split, "db (20)");
        assert_eq!((web.depth, web.w, db.depth, db.w), (1, 4, 1, 6));
        assert_eq!(split.iter().filter(|f| f.name == "serve").count(), 2);
        for serve in split.iter().filter(|f| f.name == "serve") {
            let main = parent_of(&split, serve);
            assert_eq!(main.name, "main");
            assert!(parent_of(&split, main).name.ends_with(')'));
        }
    }

    #[test]
    fn tooltips_give_module_samples_and_share() {
        let mut builder = ProfileBuilder::new(99, 0, 0);
        let p = process(1, "app");
        let (main, read) = (
            function("main", "/usr/bin/app"),
            function("vfs_read", "[kernel]"),
        );
        builder.add(&p, [&main, &read], 1);
        builder.add(&p, [&main], 3);
        let frames = parse(&render(&builder.finish(), &Options::default()));
        assert_eq!(
            find(&frames, "main").title,
            "main (/usr/bin/app) — 4 samples, 100.00%"
        );
        assert_eq!(
            find(&frames, "vfs_read").title,
            "vfs_read ([kernel]) — 1 sample, 25.00%"
        );
        assert_eq!(find(&frames, "all").title, "all — 4 samples, 100.00%");
    }

    #[test]
    fn xml_special_names_are_escaped() {
        let name = r#"operator<<"a&b"'c'>"#;
        let svg = render(
            &profile(&[(&format!("main;{name}"), 5)]),
            &Options {
                title: "<T&T>".to_owned(),
                ..Options::default()
            },
        );
        assert!(svg.contains("operator&lt;&lt;&quot;a&amp;b&quot;&#39;c&#39;&gt;"));
        assert!(!svg.contains("operator<"));
        assert!(svg.contains("&lt;T&amp;T&gt;"));
        let frames = parse(&svg);
        let frame = find(&frames, name);
        assert_eq!(frame.label.as_deref(), Some(name));
        assert!(frame.title.starts_with(name));
    }

    #[test]
    fn control_characters_become_replacement_characters() {
        let svg = render(&profile(&[("bad\u{1}name", 1)]), &Options::default());
        assert!(!svg.contains('\u{1}'));
        assert!(svg.contains("bad\u{FFFD}name"));
    }

    #[test]
    fn an_empty_profile_renders_no_samples() {
        let svg = render(&Profile::default(), &Options::default());
        assert!(svg.starts_with("<?xml"));
        assert!(svg.contains("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.contains(">no samples</text>"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(parse(&svg).is_empty());
    }

    #[test]
    fn a_stack_of_one_frame_renders_under_all() {
        let frames = parse(&render(&profile(&[("main", 1)]), &Options::default()));
        assert_eq!(frames.len(), 2);
        let main = find(&frames, "main");
        assert_eq!((main.depth, main.w), (1, 1));
        assert_eq!(parent_of(&frames, main).name, "all");
    }

    #[test]
    fn a_thousand_frames_deep_stack_renders_every_level() {
        let path: Vec<String> = (0..1000).map(|i| format!("f{i}")).collect();
        let svg = render(
            &profile(&[(&path.join(";"), 2), ("f0;side", 1)]),
            &Options::default(),
        );
        let frames = parse(&svg);
        assert_eq!(frames.len(), 1002);
        let top = find(&frames, "f999");
        assert_eq!(top.depth, 1000);
        assert!(top.rect_y >= TOP - 0.01);
        let height: f64 = between(&svg, "height=\"", "\"").unwrap().parse().unwrap();
        assert!((height - (TOP + 1001.0 * FRAME_HEIGHT + BOTTOM)).abs() < 0.01);
    }

    fn icicle() -> Options {
        Options {
            layout: Layout::Icicle,
            ..Options::default()
        }
    }

    #[test]
    fn an_icicle_draws_the_root_at_the_top_and_callees_below_their_callers() {
        let svg = render(&hot_and_cold(), &icicle());
        assert!(svg.contains("data-layout=\"icicle\""));
        let frames = parse(&svg);
        let all = find(&frames, "all");
        assert_eq!(all.rect_y, ICICLE_TOP);
        for f in frames.iter().filter(|f| f.depth > 0) {
            assert_eq!(
                f.rect_y,
                parent_of(&frames, f).rect_y + FRAME_HEIGHT,
                "{f:?}"
            );
        }
        // all, main, work, hot: four levels, and the details line in view
        // above them.
        let height: f64 = between(&svg, "height=\"", "\"").unwrap().parse().unwrap();
        assert_eq!(height, ICICLE_TOP + 4.0 * FRAME_HEIGHT + ICICLE_BOTTOM);
        let details = &svg[svg.find("class=\"details\"").unwrap()..];
        let details_y: f64 = attr(details, "y").parse().unwrap();
        assert!(details_y < ICICLE_TOP, "{details_y}");
        // The same graph upside down in the classic layout.
        let flame = parse(&render(&hot_and_cold(), &Options::default()));
        let root = find(&flame, "all");
        assert!(flame.iter().all(|f| f.rect_y <= root.rect_y));
        assert_eq!(find(&flame, "hot").rect_y, TOP);
        assert_eq!("icicle".parse::<Layout>(), Ok(Layout::Icicle));
        assert_eq!("flame".parse::<Layout>(), Ok(Layout::Flame));
        assert!("upside-down"
            .parse::<Layout>()
            .unwrap_err()
            .contains("icicle"));
    }

    /// The share of the SVG's first `px` pixels of height that frames
    /// cover.
    fn covered(svg: &str, px: f64) -> f64 {
        let width: f64 = between(svg, "width=\"", "\"").unwrap().parse().unwrap();
        let area: f64 = parse(svg)
            .iter()
            .map(|f| {
                let visible = ((f.rect_y + FRAME_HEIGHT - 1.0).min(px) - f.rect_y).max(0.0);
                visible * f.rect_w
            })
            .sum();
        area / (width * px)
    }

    #[test]
    fn the_first_screen_of_an_icicle_of_deep_stacks_shows_the_wide_frames() {
        // A program whose stacks are 25 frames deep, and a few 130 deep
        // (a recursive parser, say): the classic graph is 2,200 px tall
        // and its top 600 px hold only the deep stacks' slivers.
        let wide: Vec<String> = (0..25).map(|i| format!("f{i}")).collect();
        let mut stacks = vec![(wide.join(";"), 900), (wide[..20].join(";"), 90)];
        for tower in 0..5 {
            let deep: Vec<String> = (0..130).map(|i| format!("t{tower}_{i}")).collect();
            stacks.push((format!("f0;{}", deep.join(";")), 2));
        }
        let stacks: Vec<(&str, u64)> = stacks.iter().map(|(s, n)| (s.as_str(), *n)).collect();
        let p = profile(&stacks);
        let flame = render(&p, &Options::default());
        let icicle = render(&p, &icicle());
        let flame_covered = covered(&flame, 600.0);
        let icicle_covered = covered(&icicle, 600.0);
        assert!(flame_covered < 0.05, "flame: {flame_covered}");
        assert!(icicle_covered > 0.5, "icicle: {icicle_covered}");
    }

    #[test]
    fn frames_narrower_than_min_width_are_not_drawn_nor_anything_above_them() {
        let p = profile(&[("main;big", 10_000), ("main;tiny;above", 1)]);
        let options = Options {
            min_width_px: 1.0,
            ..Options::default()
        };
        let frames = parse(&render(&p, &options));
        assert!(frames.iter().all(|f| f.name != "tiny" && f.name != "above"));
        assert_eq!(find(&frames, "main").w, 10_001);
        let all = parse(&render(
            &p,
            &Options {
                min_width_px: 0.0,
                ..options
            },
        ));
        assert_eq!(find(&all, "above").w, 1);
    }

    #[test]
    fn labels_are_cut_to_fit_and_left_out_when_too_narrow() {
        assert_eq!(fit_label("main", 100.0).as_deref(), Some("main"));
        // 50px holds (50 - 6) / 7 = 6 characters: five and an ellipsis.
        assert_eq!(fit_label("abcdefghij", 50.0).as_deref(), Some("abcde…"));
        assert_eq!(fit_label("abcdef", 50.0).as_deref(), Some("abcdef"));
        assert_eq!(fit_label("ab", 26.0).as_deref(), None);
        assert_eq!(fit_label("abcdef", 27.0).as_deref(), Some("ab…"));
        assert_eq!(fit_label("é€😀漢字x", 40.0).as_deref(), Some("é€😀…"));
        assert_eq!(fit_label("x", f64::NAN), None);

        let long = "a_function_with_a_rather_long_name";
        let p = profile(&[(&format!("main;{long}"), 1), ("main;other", 99)]);
        let frames = parse(&render(
            &p,
            &Options {
                width: 400,
                ..Options::default()
            },
        ));
        assert_eq!(find(&frames, long).label, None, "3.8px wide");
        let p = profile(&[(&format!("main;{long}"), 20), ("main;other", 80)]);
        let frames = parse(&render(
            &p,
            &Options {
                width: 400,
                ..Options::default()
            },
        ));
        let label = find(&frames, long).label.clone().unwrap();
        assert!(label.ends_with('…') && long.starts_with(label.trim_end_matches('…')));
        assert!(label.chars().count() as f64 * CHAR_WIDTH <= find(&frames, long).rect_w);
    }

    #[test]
    fn user_frames_are_warm_and_keep_their_colour() {
        let p = profile(&[("main;alpha;beta;gamma", 1), ("main;delta", 1)]);
        let frames = parse(&render(&p, &Options::default()));
        for f in frames.iter().filter(|f| f.name != "all") {
            let [r, g, b] = f.fill;
            assert!(r >= 225 && r >= g && g >= b, "{} is {:?}", f.name, f.fill);
        }
        // The colour is the name's alone: the same in every module of a
        // family, and in every run (the FNV-1a reference values pin the
        // hash, which no per-process seed could).
        let main = Kind::Function { module: "app" };
        assert_eq!(
            colour("main", main),
            colour("main", Kind::Function { module: "lib" })
        );
        assert_eq!(find(&frames, "main").fill, colour("main", main));
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn kernel_frames_are_brown_and_jit_frames_green() {
        let mut builder = ProfileBuilder::new(99, 0, 0);
        let p = process(1, "app");
        let frames_ = [
            function("main", "app"),
            function("jitted", "[jit]"),
            function("sys_write", "[kernel]"),
        ];
        builder.add(&p, &frames_, 1);
        let frames = parse(&render(&builder.finish(), &Options::default()));
        let [r, g, b] = find(&frames, "sys_write").fill;
        assert!(r > g && g > b && r <= 210, "kernel {:?}", [r, g, b]);
        let [r, g, b] = find(&frames, "jitted").fill;
        assert!(g > r && g > b, "jit {:?}", [r, g, b]);
    }

    #[test]
    fn a_diff_colours_growth_red_and_shrinkage_blue_with_widths_from_new() {
        let base = profile(&[("main;work;hot", 30), ("main;work;cold", 70)]);
        let new = profile(&[("main;work;hot", 140), ("main;work;cold", 60)]);
        let frames = parse(&render_diff(&base, &new, &Options::default()));
        let (hot, cold, all) = (
            find(&frames, "hot"),
            find(&frames, "cold"),
            find(&frames, "all"),
        );
        assert!(hot.fill[0] > hot.fill[2], "grew: {:?}", hot.fill);
        assert!(cold.fill[2] > cold.fill[0], "shrank: {:?}", cold.fill);
        assert_eq!((all.w, hot.w, cold.w), (200, 140, 60));
        assert!((hot.rect_w - 0.7 * all.rect_w).abs() <= 1.0);
        // Both changed by the most of any frame: full colour.
        assert_eq!(hot.fill, [255, 70, 70]);
        assert_eq!(cold.fill, [70, 70, 255]);
        // main's share is 100% in both.
        assert_eq!(find(&frames, "main").fill, [240, 240, 240]);
        assert_eq!(hot.title, "hot — base 30.00% → new 70.00% (+40.00 points)");
        assert_eq!(
            cold.title,
            "cold — base 70.00% → new 30.00% (-40.00 points)"
        );
        assert_eq!(all.title, "all — base 100.00% → new 100.00% (±0.00 points)");
    }

    #[test]
    fn a_diff_scales_colour_to_the_largest_change() {
        let base = profile(&[("a", 50), ("b", 40), ("c", 10)]);
        let new = profile(&[("a", 30), ("b", 50), ("c", 20)]);
        let frames = parse(&render_diff(&base, &new, &Options::default()));
        // a lost 20 points (the most), b and c gained 10 each: half colour.
        assert_eq!(find(&frames, "a").fill, [70, 70, 255]);
        for name in ["b", "c"] {
            let [r, g, b] = find(&frames, name).fill;
            assert!(
                r.abs_diff(248) <= 1 && g.abs_diff(155) <= 1 && g == b,
                "{name}: {r} {g} {b}"
            );
        }
    }

    #[test]
    fn paths_only_in_base_are_not_drawn() {
        let base = profile(&[("main;gone", 50), ("main;kept", 50)]);
        let new = profile(&[("main;kept", 10), ("main;fresh", 10)]);
        let frames = parse(&render_diff(&base, &new, &Options::default()));
        assert!(frames.iter().all(|f| f.name != "gone"));
        let fresh = find(&frames, "fresh");
        assert!(
            fresh.title.contains("base 0.00% → new 50.00%"),
            "{}",
            fresh.title
        );
        assert_eq!(find(&frames, "kept").fill, [240, 240, 240]);
    }

    #[test]
    fn a_diff_of_equal_profiles_is_neutral() {
        let p = hot_and_cold();
        let frames = parse(&render_diff(&p, &p, &Options::default()));
        assert_eq!(frames.len(), 5);
        assert!(
            frames.iter().all(|f| f.fill == [240, 240, 240]),
            "{frames:?}"
        );
        // The same shares from different counts are no change either.
        let double = profile(&[("main;work;hot", 140), ("main;work;cold", 60)]);
        let frames = parse(&render_diff(&p, &double, &Options::default()));
        assert!(frames.iter().all(|f| f.fill == [240, 240, 240]));
    }

    #[test]
    fn a_diff_with_an_empty_side_does_not_panic() {
        let p = hot_and_cold();
        let empty = Profile::default();
        let svg = render_diff(&p, &empty, &Options::default());
        assert!(svg.contains(">no samples</text>"));
        let frames = parse(&render_diff(&empty, &p, &Options::default()));
        // Everything is new: every frame grew, the widest the most.
        assert!(frames.iter().all(|f| f.fill[0] > f.fill[2]));
        assert_eq!(find(&frames, "all").fill, [255, 70, 70]);
    }

    #[test]
    fn a_diff_by_process_matches_processes_by_name_and_pid() {
        let (a, b) = (process(10, "web"), process(20, "db"));
        let base = profile_in(&[(&a, "main", 1), (&b, "main", 3)]);
        let new = profile_in(&[(&a, "main", 3), (&b, "main", 1)]);
        let options = Options {
            roots: vec![Root::Process],
            ..Options::default()
        };
        let frames = parse(&render_diff(&base, &new, &options));
        assert!(find(&frames, "web (10)").fill[0] > find(&frames, "web (10)").fill[2]);
        assert!(find(&frames, "db (20)").fill[2] > find(&frames, "db (20)").fill[0]);
    }

    #[test]
    fn the_svg_is_standalone_with_a_small_script() {
        let svg = render(&hot_and_cold(), &Options::default());
        assert!(svg.contains("viewBox=\"0 0 1200 "));
        assert!(svg.contains("font-family=\"monospace\""));
        assert!(svg.contains("class=\"title\""));
        assert!(svg.contains("class=\"details\""));
        assert!(svg.contains("<script type=\"text/ecmascript\"><![CDATA["));
        assert!(!svg.contains("href"), "no external resources");
        assert!(!SCRIPT.contains("]]>"));
        assert!(SCRIPT.lines().count() < 120);
        assert_eq!(svg.matches("<g").count(), svg.matches("</g>").count());
    }

    #[test]
    fn tiny_or_odd_widths_do_not_panic() {
        for width in [0, 1, 21, 30] {
            let svg = render(
                &hot_and_cold(),
                &Options {
                    width,
                    ..Options::default()
                },
            );
            assert!(svg.contains("data-name=\"all\""));
        }
        let options = Options {
            min_width_px: f64::NAN,
            ..Options::default()
        };
        assert_eq!(parse(&render(&hot_and_cold(), &options)).len(), 5);
    }

    proptest! {
        #[test]
        fn frames_nest_and_siblings_tile_for_any_profile(
            stacks in prop::collection::vec(
                (prop::collection::vec(0u8..5, 1..12), 1u64..50, 0u32..3),
                0..30,
            ),
            rooted in any::<bool>(),
            upside_down in any::<bool>(),
        ) {
            let procs: Vec<Process> = (0..3).map(|i| process(i, "p")).collect();
            let mut builder = ProfileBuilder::new(99, 0, 0);
            for (names, count, proc_) in &stacks {
                let frames: Vec<Function> = names.iter().map(|n| function(&format!("f{n}"), "m")).collect();
                builder.add(&procs[*proc_ as usize], &frames, *count);
            }
            let p = builder.finish();
            let roots = if rooted { vec![Root::Process, Root::Thread] } else { Vec::new() };
            let layout = if upside_down { Layout::Icicle } else { Layout::Flame };
            let options = Options { roots, min_width_px: 0.0, layout, ..Options::default() };
            let step = if upside_down { FRAME_HEIGHT } else { -FRAME_HEIGHT };
            for svg in [render(&p, &options), render_diff(&p, &p, &options)] {
                let frames = parse(&svg);
                let total: u64 = stacks.iter().map(|s| s.1).sum();
                if total == 0 {
                    prop_assert!(frames.is_empty());
                    continue;
                }
                for f in frames.iter().filter(|f| f.depth > 0) {
                    let parent = parent_of(&frames, f);
                    prop_assert!(f.x + f.w <= parent.x + parent.w);
                    prop_assert_eq!(f.rect_y, parent.rect_y + step);
                    prop_assert!(f.rect_x + f.rect_w <= parent.rect_x + parent.rect_w + 0.02);
                }
                // The children of a frame never add up to more than it.
                for parent in &frames {
                    let children: u64 = frames
                        .iter()
                        .filter(|f| f.depth == parent.depth + 1 && f.x >= parent.x && f.x < parent.x + parent.w)
                        .map(|f| f.w)
                        .sum();
                    prop_assert!(children <= parent.w);
                }
                prop_assert_eq!(find(&frames, "all").w, total);
            }
        }
    }
}
