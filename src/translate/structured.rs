//! The structured form of a transaction set: its segments grouped into the loops of its
//! definition, elements named, the 856's HL levels nested by parent.
//!
//! ```json
//! {"BEG": {"transaction_set_purpose_code_01": "00", ...},
//!  "N1_loop": [{"N1": {...}, "N3": [{...}]}],
//!  "PO1_loop": [{"PO1": {...}, "PID_loop": [...]}]}
//! ```
//!
//! A segment or loop the definition allows once is an object, one allowed more often an
//! array; a repeating element is an array, a composite an object of its components; empty
//! elements are left out. HL loops nest under their parent's `HL_loop` when the file lists
//! each level right after its parent (as 856s do); otherwise they stay in order, unnested.
//! A set the definition cannot hold exactly (misplaced segments, more elements than defined)
//! stays in the generic form, so nothing is ever lost.
//!
//! A set is built as a [`Tree`] that borrows its keys from the definition and its text from
//! the input, and is serialised from that directly: a `serde_json::Value` per set (a `String`
//! per key and per value, a B-tree per object) made translation several times slower than
//! reading. Objects keep their entries sorted by key, so the bytes are those a `Value` gives.
//! Rendering JSON back (`render`) still reads a `Value`.

use std::borrow::Cow;

#[cfg(test)]
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::{Map, Value};

use crate::schema::check::{walk, Place};
use crate::schema::{ElementDef, Kind, SetDef};
use crate::x12::{Element, TransactionSet};

/// Why a set's content could not be rendered: the place, and the problem.
pub(super) type Problem = (String, String);

/// A rendered segment: its id and elements, each a list of repetitions, each a list of
/// components.
pub(super) type Rendered = (String, Vec<Vec<Vec<String>>>);

/// HL levels nested at most this deep (shipment, order, tare, pack, item is 5).
const MAX_NESTING: usize = 32;

/// Text of the input as JSON text: borrowed when the bytes already are that text.
pub(super) type Decode<'d> = dyn for<'b> Fn(&'b [u8]) -> Cow<'b, str> + 'd;

/// A value of the structured form: keys borrowed from the definition, text from the input
/// where its encoding allows.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tree<'a> {
    Text(Cow<'a, str>),
    List(Vec<Tree<'a>>),
    Object(Object<'a>),
}

/// An object's entries, sorted by key (as `serde_json::Map` orders them), keys unique.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct Object<'a>(Vec<(&'a str, Tree<'a>)>);

impl<'a> Object<'a> {
    /// Inserts or replaces; whether the key was new.
    fn insert(&mut self, key: &'a str, value: Tree<'a>) -> bool {
        match self.0.binary_search_by(|(k, _)| (*k).cmp(key)) {
            Ok(i) => {
                if let Some(slot) = self.0.get_mut(i) {
                    slot.1 = value;
                }
                false
            }
            Err(i) => {
                self.0.insert(i, (key, value));
                true
            }
        }
    }

    /// The value under the definition's own `key` (the very string, see [`same_key`]).
    fn find(&self, key: &str) -> Option<&Tree<'a>> {
        self.0
            .iter()
            .find(|(k, _)| same_key(k, key))
            .map(|(_, v)| v)
    }
}

/// Whether `key` is the definition's `def_key` itself: a tree's keys are borrowed from the
/// definition it was built by, so the check of [`exact`] compares addresses, not bytes (a
/// key from elsewhere would only be passed over, and the set stay generic).
fn same_key(def_key: &str, key: &str) -> bool {
    std::ptr::eq(def_key, key)
}

impl Tree<'_> {
    /// The same value as a `serde_json::Value`.
    #[cfg(test)]
    pub(super) fn to_value(&self) -> Value {
        match self {
            Tree::Text(s) => Value::String(s.to_string()),
            Tree::List(items) => Value::Array(items.iter().map(Tree::to_value).collect()),
            Tree::Object(o) => Value::Object(
                o.0.iter()
                    .map(|(k, v)| ((*k).to_string(), v.to_value()))
                    .collect::<Map<String, Value>>(),
            ),
        }
    }

    /// Appends this value as JSON: the very bytes `serde_json` gives for it, written
    /// without its serializer. serde_json's string escaping looks up every byte of every
    /// key and value, and was the largest single cost of a document's file.
    pub(super) fn write_json(&self, out: &mut Vec<u8>) -> std::io::Result<()> {
        match self {
            Tree::Text(s) => write_json_str(s, out)?,
            Tree::List(items) => {
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    item.write_json(out)?;
                }
                out.push(b']');
            }
            Tree::Object(o) => {
                out.push(b'{');
                for (i, (k, v)) in o.0.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write_json_str(k, out)?;
                    out.push(b':');
                    v.write_json(out)?;
                }
                out.push(b'}');
            }
        }
        Ok(())
    }
}

/// `s` as a JSON string. Text without a control character, a quote or a backslash (what
/// `serde_json` escapes, and nearly all X12 text) is copied as it is; other text is left to
/// `serde_json`. (A fold without early exit measured fewer instructions than `all`.)
pub(super) fn write_json_str(s: &str, out: &mut Vec<u8>) -> std::io::Result<()> {
    let plain = s.bytes().fold(true, |plain, b| {
        plain & (b >= 0x20) & (b != b'"') & (b != b'\\')
    });
    if plain {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
        return Ok(());
    }
    serde_json::to_writer(out, s).map_err(std::io::Error::from)
}

/// The tree as serde writes it: what [`Tree::write_json`] is held to in the tests.
#[cfg(test)]
impl Serialize for Tree<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Tree::Text(s) => serializer.serialize_str(s),
            Tree::List(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Tree::Object(o) => {
                let mut map = serializer.serialize_map(Some(o.0.len()))?;
                for (k, v) in &o.0 {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

/// One open loop iteration while building.
struct OpenLoop<'a> {
    node: usize,
    obj: Object<'a>,
    /// For an iteration of the hierarchy loop: HL01 and HL02.
    hl: Option<(Cow<'a, str>, Cow<'a, str>)>,
}

/// An iteration of the hierarchy loop: HL01, HL02 and its content.
type Level<'a> = (Cow<'a, str>, Cow<'a, str>, Object<'a>);

/// The structured content of `ts`, or `None` when the definition cannot hold it exactly.
pub(super) fn content<'a>(
    def: &'a SetDef,
    ts: &TransactionSet<'a>,
    decode: &Decode<'_>,
) -> Option<Tree<'a>> {
    // Missing segments do not matter here, only segments that have no place.
    let walked = walk(def, ts, 0, 0, true);
    let mut stack = vec![OpenLoop {
        node: 0,
        obj: Object::default(),
        hl: None,
    }];
    // Iterations of the hierarchy loop, in order, with the loop frame they belong to.
    let mut levels: Vec<Level<'a>> = Vec::new();
    for (segment, place) in ts.body.segments().zip(&walked.places) {
        let Place { node, kept, opened } = (*place)?;
        while stack.len() > kept {
            if !close(def, &mut stack, &mut levels) {
                return None;
            }
        }
        if let Some(loop_node) = opened {
            let hl = (Some(loop_node) == def.hierarchy).then(|| {
                let value = |n| decode(segment.element(n).unwrap_or_default());
                (value(1), value(2))
            });
            stack.push(OpenLoop {
                node: loop_node,
                obj: Object::default(),
                hl,
            });
        }
        let seg_def = def.segment_of(node)?;
        let mut obj = Object(Vec::with_capacity(seg_def.elements.len()));
        for (i, e) in segment.elements().enumerate() {
            if e.value.is_empty() {
                continue;
            }
            let edef = seg_def.elements.get(i)?;
            obj.insert(&edef.key, element(edef, e, decode)?);
        }
        let top = stack.last_mut()?;
        let n = def.nodes.get(node)?;
        if !add(&mut top.obj, &n.key, n.max, Tree::Object(obj)) {
            return None;
        }
    }
    while stack.len() > 1 {
        if !close(def, &mut stack, &mut levels) {
            return None;
        }
    }
    let mut root = stack.pop()?;
    if let Some(h) = def.hierarchy.filter(|_| !levels.is_empty()) {
        let key = &def.nodes.get(h)?.key;
        root.obj.insert(key, nest(key, levels));
    }
    let content = Tree::Object(root.obj);
    exact(def, ts, &content, decode).then_some(content)
}

/// Whether `content` renders back to exactly the set's segments. What a definition cannot
/// say (a trailing empty element, an empty composite, an unnested HL out of order) makes the
/// set stay generic instead of changing on its way through. The rendering of [`segments`],
/// compared segment by segment as it is made, without the places an error would name.
fn exact(def: &SetDef, ts: &TransactionSet<'_>, content: &Tree<'_>, decode: &Decode<'_>) -> bool {
    let Tree::Object(obj) = content else {
        return false;
    };
    let mut check = Exact {
        raw: ts.body.segments(),
        decode,
        text: String::new(),
    };
    check.node(def, 0, obj) && check.raw.next().is_none()
}

/// The state of [`exact`]: the segments not yet matched, and buffers reused per segment.
struct Exact<'d, I> {
    raw: I,
    decode: &'d Decode<'d>,
    text: String,
}

impl<'s, I: Iterator<Item = crate::x12::Segment<'s>>> Exact<'_, I> {
    /// [`render_loop`]: every key known, children in definition order.
    fn node(&mut self, def: &SetDef, node: usize, obj: &Object<'_>) -> bool {
        let Some(n) = def.nodes.get(node) else {
            return false;
        };
        let nested = Some(node) == def.hierarchy;
        // Every key known: the children's keys are distinct, so the keys found by them are
        // all of the object's exactly when as many were found as it has.
        let mut found = 0;
        for child in &n.children {
            // Every key found: the children after match none. Keys are compared by address
            // ([`same_key`]), so each entry is one child's own; the hierarchy's own key is
            // no child's, and is looked for below.
            if found == obj.0.len() {
                break;
            }
            let Some(c) = def.nodes.get(*child) else {
                return false;
            };
            let Some(value) = obj.find(&c.key) else {
                continue;
            };
            found += 1;
            let ok = each_item(value, c.max, |item| {
                if c.is_loop() {
                    self.node(def, *child, item)
                } else {
                    self.segment(def, *child, item)
                }
            });
            if !ok {
                return false;
            }
        }
        if nested {
            if let Some(value) = obj.find(&n.key) {
                found += 1;
                if !each_item(value, u32::MAX, |item| self.node(def, node, item)) {
                    return false;
                }
            }
        }
        found == obj.0.len()
    }

    /// [`segment`] and [`segment_text`], compared with the next segment read: the text is
    /// made in one buffer, cut back after the last element (and the last component) that
    /// holds anything, as [`segment`] and [`components`] drop the empty ones at the end.
    fn segment(&mut self, def: &SetDef, node: usize, obj: &Object<'_>) -> bool {
        let Some(sdef) = def.segment_of(node) else {
            return false;
        };
        let Some(raw) = self.raw.next() else {
            return false;
        };
        let d = raw.delimiters;
        let decode = self.decode;
        let (e, c, r) = ([d.element], [d.component], d.repetition.map(|r| [r]));
        let (e, c) = (decode(&e), decode(&c));
        let r = r.as_ref().map(|r| decode(r)).unwrap_or_default();
        let text = &mut self.text;
        text.clear();
        text.push_str(&sdef.id);
        let mut kept = text.len();
        // Every key an element's, counted as in [`Exact::node`].
        let mut found = 0;
        for edef in &sdef.elements {
            // Every key found (each entry one element's own, see [`same_key`]): the elements
            // after are empty, and their separators cut off below anyway.
            if found == obj.0.len() {
                break;
            }
            text.push_str(&e);
            let Some(v) = obj.find(&edef.key) else {
                continue;
            };
            found += 1;
            let mut filled = false;
            if edef.repeat > 1 {
                let Tree::List(items) = v else {
                    return false;
                };
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        text.push_str(&r);
                    }
                    let Some(f) = write_components(edef, item, &c, text) else {
                        return false;
                    };
                    filled |= f;
                }
            } else {
                let Some(f) = write_components(edef, v, &c, text) else {
                    return false;
                };
                filled = f;
            }
            if filled {
                kept = text.len();
            }
        }
        text.truncate(kept);
        found == obj.0.len() && decode(raw.raw) == *text
    }
}

/// Calls `f` on each item of `value` as [`items`] reads it; false when it has the wrong
/// shape or `f` says so.
fn each_item<'t, 'a>(
    value: &'t Tree<'a>,
    max: u32,
    mut f: impl FnMut(&'t Object<'a>) -> bool,
) -> bool {
    match value {
        Tree::Object(o) if max == 1 => f(o),
        Tree::List(a) if max > 1 => a.iter().all(|v| match v {
            Tree::Object(o) => f(o),
            _ => false,
        }),
        _ => false,
    }
}

/// [`components`] on a tree, written to `text` joined by `sep`, empty ones at the end left
/// out: whether any holds anything, or `None` when `v` has the wrong shape.
fn write_components(def: &ElementDef, v: &Tree<'_>, sep: &str, text: &mut String) -> Option<bool> {
    match (&def.kind, v) {
        (Kind::Simple(_), Tree::Text(s)) => {
            text.push_str(s);
            Some(!s.is_empty())
        }
        (Kind::Composite { components, .. }, Tree::Object(o)) => {
            let start = text.len();
            let mut kept = start;
            let mut found = 0;
            for (i, c) in components.iter().enumerate() {
                if i > 0 {
                    text.push_str(sep);
                }
                match o.find(&c.key) {
                    Some(Tree::Text(s)) => {
                        found += 1;
                        text.push_str(s);
                        if !s.is_empty() {
                            kept = text.len();
                        }
                    }
                    None => {}
                    Some(_) => return None,
                }
            }
            if found != o.0.len() {
                return None;
            }
            text.truncate(kept);
            Some(kept > start)
        }
        _ => None,
    }
}

/// A rendered segment as text, without its terminator, with the element, component and
/// repetition separators given.
#[cfg(test)]
fn segment_text(id: &str, elements: &[Vec<Vec<String>>], [e, c, r]: [&str; 3]) -> String {
    let mut text = id.to_string();
    for reps in elements {
        text.push_str(e);
        let reps: Vec<String> = reps.iter().map(|parts| parts.join(c)).collect();
        text.push_str(&reps.join(r));
    }
    text
}

/// Closes the innermost open iteration into its parent; iterations of a hierarchy loop at
/// the top level wait in `levels`, to be nested by parent at the end.
fn close<'a>(def: &'a SetDef, stack: &mut Vec<OpenLoop<'a>>, levels: &mut Vec<Level<'a>>) -> bool {
    let Some(level) = stack.pop() else {
        return false;
    };
    let Some(n) = def.nodes.get(level.node) else {
        return false;
    };
    if let Some((id, parent)) = level.hl {
        if n.parent == 0 {
            levels.push((id, parent, level.obj));
            return true;
        }
    }
    match stack.last_mut() {
        Some(top) => add(&mut top.obj, &n.key, n.max, Tree::Object(level.obj)),
        None => false,
    }
}

/// Adds `value` under `key`: as the object itself when the definition allows one, else to
/// an array. False when a second one arrives where only one fits (over its maximum use).
fn add<'a>(obj: &mut Object<'a>, key: &'a str, max: u32, value: Tree<'a>) -> bool {
    if max == 1 {
        return obj.insert(key, value);
    }
    match obj.0.binary_search_by(|(k, _)| (*k).cmp(key)) {
        Ok(i) => match obj.0.get_mut(i) {
            Some((_, Tree::List(a))) => a.push(value),
            Some((_, slot)) => *slot = Tree::List(vec![value]),
            None => {}
        },
        Err(i) => obj.0.insert(i, (key, Tree::List(vec![value]))),
    }
    true
}

/// HL iterations nested under their parents when each follows its parent's subtree in
/// order (pre-order), else the flat list.
fn nest<'a>(key: &'a str, levels: Vec<Level<'a>>) -> Tree<'a> {
    // Pre-order check: each level's parent is on the path from the root to the previous one.
    let mut path: Vec<&str> = Vec::new();
    let mut nestable = true;
    for (id, parent, _) in &levels {
        while path.last().is_some_and(|p| p != parent) {
            path.pop();
        }
        // Deeper than any real hierarchy, a tree would only strain the stack and JSON
        // readers' nesting limits (serde_json's is 128).
        if path.is_empty() && !parent.is_empty()
            || path.contains(&&**id)
            || path.len() >= MAX_NESTING
        {
            nestable = false;
            break;
        }
        path.push(id);
    }
    if !nestable {
        return Tree::List(levels.into_iter().map(|l| Tree::Object(l.2)).collect());
    }
    let mut roots = Vec::new();
    let mut open: Vec<(Cow<'a, str>, Object<'a>)> = Vec::new();
    let attach = |open: &mut Vec<(Cow<'a, str>, Object<'a>)>, roots: &mut Vec<Tree<'a>>| {
        if let Some((_, obj)) = open.pop() {
            match open.last_mut() {
                Some((_, parent)) => {
                    add(parent, key, u32::MAX, Tree::Object(obj));
                }
                None => roots.push(Tree::Object(obj)),
            }
        }
    };
    for (id, parent, obj) in levels {
        while open.last().is_some_and(|(p, _)| *p != parent) {
            attach(&mut open, &mut roots);
        }
        open.push((id, obj));
    }
    while !open.is_empty() {
        attach(&mut open, &mut roots);
    }
    Tree::List(roots)
}

fn element<'a>(def: &'a ElementDef, e: Element<'a>, decode: &Decode<'_>) -> Option<Tree<'a>> {
    if def.repeat > 1 {
        let reps: Option<Vec<Tree<'a>>> = e.repetitions().map(|r| single(def, r, decode)).collect();
        return reps.map(Tree::List);
    }
    if e.is_repeated() {
        return None;
    }
    single(def, e, decode)
}

fn single<'a>(def: &'a ElementDef, e: Element<'a>, decode: &Decode<'_>) -> Option<Tree<'a>> {
    match &def.kind {
        Kind::Simple(_) => (!e.is_composite()).then(|| Tree::Text(decode(e.value))),
        Kind::Composite { components, .. } => {
            let mut obj = Object::default();
            for (i, c) in e.components().enumerate() {
                if c.is_empty() {
                    continue;
                }
                obj.insert(&components.get(i)?.key, Tree::Text(decode(c)));
            }
            Some(Tree::Object(obj))
        }
    }
}

// ---------------------------------------------------------------- rendering

/// The body segments of structured `content`, in definition order, as (id, elements) where
/// each element is a list of repetitions, each a list of components.
pub(super) fn segments(
    def: &SetDef,
    content: &Value,
    place: &str,
) -> Result<Vec<Rendered>, Problem> {
    let mut out = Vec::new();
    let obj = content
        .as_object()
        .ok_or_else(|| (place.to_string(), "content must be an object".to_string()))?;
    render_loop(def, 0, obj, place, &mut out)?;
    Ok(out)
}

fn items<'v>(
    value: &'v Value,
    max: u32,
    place: &str,
) -> Result<Vec<&'v Map<String, Value>>, Problem> {
    let problem = |what: &str| (place.to_string(), what.to_string());
    match value {
        Value::Object(o) if max == 1 => Ok(vec![o]),
        Value::Array(a) if max > 1 => a
            .iter()
            .map(|v| {
                v.as_object()
                    .ok_or_else(|| problem("expected an object in the array"))
            })
            .collect(),
        _ if max == 1 => Err(problem("expected an object (the definition allows one)")),
        _ => Err(problem("expected an array of objects")),
    }
}

fn render_loop(
    def: &SetDef,
    node: usize,
    obj: &Map<String, Value>,
    place: &str,
    out: &mut Vec<Rendered>,
) -> Result<(), Problem> {
    let n = &def.nodes[node];
    let nested = Some(node) == def.hierarchy;
    for key in obj.keys() {
        let known = n.children.iter().any(|c| def.nodes[*c].key == *key) || nested && *key == n.key;
        if !known {
            return Err((
                place.to_string(),
                format!("{key:?} is not a segment or loop of this place in the definition"),
            ));
        }
    }
    for child in &n.children {
        let c = &def.nodes[*child];
        let Some(value) = obj.get(&c.key) else {
            continue;
        };
        let here = format!("{place}/{}", c.key);
        for (i, item) in items(value, c.max, &here)?.into_iter().enumerate() {
            let here = if c.max == 1 {
                here.clone()
            } else {
                format!("{here}[{i}]")
            };
            if c.is_loop() {
                render_loop(def, *child, item, &here, out)?;
            } else {
                out.push(segment(def, *child, item, &here)?);
            }
        }
    }
    if nested {
        if let Some(value) = obj.get(&n.key) {
            let here = format!("{place}/{}", n.key);
            for (i, item) in items(value, u32::MAX, &here)?.into_iter().enumerate() {
                render_loop(def, node, item, &format!("{here}[{i}]"), out)?;
            }
        }
    }
    Ok(())
}

fn segment(
    def: &SetDef,
    node: usize,
    obj: &Map<String, Value>,
    place: &str,
) -> Result<Rendered, Problem> {
    let problem = |what: String| (place.to_string(), what);
    let sdef = def
        .segment_of(node)
        .ok_or_else(|| problem("no definition".into()))?;
    for key in obj.keys() {
        if !sdef.elements.iter().any(|e| e.key == *key) {
            return Err(problem(format!("{key:?} is not an element of {}", sdef.id)));
        }
    }
    let mut elements = Vec::new();
    for edef in &sdef.elements {
        let Some(v) = obj.get(&edef.key) else {
            elements.push(Vec::new());
            continue;
        };
        let here = format!("{place}.{}", edef.key);
        let reps = if edef.repeat > 1 {
            v.as_array()
                .ok_or_else(|| (here.clone(), "a repeating element is an array".to_string()))?
                .iter()
                .map(|r| components(edef, r, &here))
                .collect::<Result<Vec<_>, _>>()?
        } else {
            vec![components(edef, v, &here)?]
        };
        elements.push(reps);
    }
    while elements
        .last()
        .is_some_and(|e| e.iter().all(|r| r.iter().all(String::is_empty)))
    {
        elements.pop();
    }
    Ok((sdef.id.clone(), elements))
}

fn components(def: &ElementDef, v: &Value, place: &str) -> Result<Vec<String>, Problem> {
    let problem = |what: String| (place.to_string(), what);
    match (&def.kind, v) {
        (Kind::Simple(_), Value::String(s)) => Ok(vec![s.clone()]),
        (Kind::Simple(_), _) => Err(problem("expected a string".into())),
        (Kind::Composite { components, .. }, Value::Object(o)) => {
            for key in o.keys() {
                if !components.iter().any(|c| c.key == *key) {
                    return Err(problem(format!(
                        "{key:?} is not a component of {}",
                        def.reference
                    )));
                }
            }
            let mut parts: Vec<String> = components
                .iter()
                .map(|c| match o.get(&c.key) {
                    Some(Value::String(s)) => Ok(s.clone()),
                    None => Ok(String::new()),
                    Some(_) => Err(problem(format!("{} must be a string", c.key))),
                })
                .collect::<Result<_, _>>()?;
            while parts.last().is_some_and(String::is_empty) {
                parts.pop();
            }
            Ok(parts)
        }
        (Kind::Composite { .. }, _) => {
            Err(problem("a composite is an object of its components".into()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::sample::{DICT, SET, SHIP};
    use crate::schema::Schemas;
    use crate::x12::{Interchanges, Limits};

    fn schemas() -> Schemas {
        Schemas::load(&[
            ("004010/segments.toml", DICT),
            ("004010/850.toml", SET),
            ("004010/856.toml", SHIP),
        ])
        .unwrap()
    }

    /// The structured content of a one-set interchange, and its body rendered back.
    fn round_trip(id: &str, body: &str) -> (Option<Value>, Option<String>) {
        let s = schemas();
        let count = body.matches('~').count() + 2;
        let x = format!(
            "ISA*00*          *00*          *ZZ*A              *ZZ*B              *240101*1200*^*00501*000000001*0*P*:~\
GS*PO*A*B*20240101*1200*1*X*004010~ST*{id}*0001~{body}SE*{count}*0001~GE*1*1~IEA*1*000000001~"
        );
        let ic = Interchanges::new(x.as_bytes(), Limits::default())
            .next()
            .unwrap()
            .unwrap();
        let def = s.find(b"004010", id.as_bytes()).unwrap();
        let content = content(
            def,
            &ic.groups[0].sets.get(0).unwrap(),
            &String::from_utf8_lossy,
        )
        .map(|t| t.to_value());
        let rendered = content.as_ref().map(|c| {
            let rendered = segments(def, c, "test").unwrap();
            rendered
                .iter()
                .map(|(id, elements)| segment_text(id, elements, ["*", ":", "^"]) + "~")
                .collect()
        });
        (content, rendered)
    }

    #[test]
    fn loops_and_named_elements_round_trip() {
        let body =
            "BEG*00*PO1*20240101~REF*DP*1~N1*ST*X~N3*A~N1*BT*Y~PO1*1*2*EA:2*3~PID*F~PO1*2~CTT*2~";
        let (content, rendered) = round_trip("850", body);
        let c = content.unwrap();
        assert_eq!(c["BEG"]["number_02"], "PO1");
        assert_eq!(c["REF"][0]["qualifier_01"], "DP");
        assert_eq!(c["N1_loop"][1]["N1"]["name_02"], "Y");
        assert_eq!(c["N1_loop"][0]["N3"]["address_01"], "A");
        assert_eq!(c["PO1_loop"][0]["PO1"]["unit_03"]["exponent_02"], "2");
        assert_eq!(c["PO1_loop"][0]["PID"]["type_01"], "F");
        assert_eq!(c["PO1_loop"].as_array().unwrap().len(), 2);
        assert_eq!(c["CTT"]["lines_01"], "2");
        assert_eq!(rendered.unwrap(), body);
    }

    #[test]
    fn hl_levels_nest_by_parent_in_pre_order_and_stay_flat_otherwise() {
        let body =
            "BSN*S1~HL*1**S~REF*BM*1~HL*2*1*O~N1*ST*X~HL*3*2*I~HL*4*2*I~HL*5*1*O~HL*6*5*I~CTT*6~";
        let (content, rendered) = round_trip("856", body);
        let c = content.unwrap();
        let shipment = &c["HL_loop"][0];
        assert_eq!(c["HL_loop"].as_array().unwrap().len(), 1);
        assert_eq!(shipment["REF"][0]["qualifier_01"], "BM");
        let orders = shipment["HL_loop"].as_array().unwrap();
        assert_eq!(orders.len(), 2);
        assert_eq!(orders[0]["N1_loop"][0]["N1"]["entity_01"], "ST");
        assert_eq!(orders[0]["HL_loop"].as_array().unwrap().len(), 2);
        assert_eq!(
            orders[1]["HL_loop"][0]["HL"]["hierarchical_id_number_01"],
            "6"
        );
        assert_eq!(rendered.unwrap(), body);
        // All orders first, then all items: not pre-order, so the levels stay flat.
        let body = "BSN*S1~HL*1**S~HL*2*1*O~HL*3*1*O~HL*4*2*I~HL*5*3*I~";
        let (content, rendered) = round_trip("856", body);
        assert_eq!(content.unwrap()["HL_loop"].as_array().unwrap().len(), 5);
        assert_eq!(rendered.unwrap(), body);
    }

    #[test]
    fn a_chain_deeper_than_any_real_hierarchy_stays_flat() {
        let chain = |n: usize| {
            let mut body = String::from("BSN*S1~HL*1**S~");
            for i in 2..=n {
                body.push_str(&format!("HL*{i}*{}*I~", i - 1));
            }
            body
        };
        let (content, rendered) = round_trip("856", &chain(MAX_NESTING));
        assert_eq!(content.unwrap()["HL_loop"].as_array().unwrap().len(), 1);
        assert_eq!(rendered.unwrap(), chain(MAX_NESTING));
        let deep = chain(MAX_NESTING + 1);
        let (content, rendered) = round_trip("856", &deep);
        let levels = content.unwrap()["HL_loop"].as_array().unwrap().len();
        assert_eq!(levels, MAX_NESTING + 1);
        assert_eq!(rendered.unwrap(), deep);
    }

    #[test]
    fn what_the_definition_cannot_hold_stays_generic() {
        // Out of sequence, and an element past the definition's last.
        assert!(round_trip("850", "REF*DP*1~BEG*00*1~PO1*1~").0.is_none());
        assert!(round_trip("850", "BEG*00*1*20240101*1200*X~PO1*1~")
            .0
            .is_none());
        // A trailing empty element or an empty composite has no name to stand under.
        assert!(round_trip("850", "BEG*00*1*~PO1*1~").0.is_none());
        assert!(round_trip("850", "BEG*00*1~PO1*1*2*:*3~").0.is_none());
        // A second BEG has no place in an object.
        assert!(round_trip("850", "BEG*00*1~BEG*00*2~PO1*1~").0.is_none());
        // Element errors and missing segments do not stop the structured form.
        assert!(round_trip("850", "BEG*99*1~PO1*1~").0.is_some());
    }

    #[test]
    fn rendering_names_the_place_of_a_bad_key() {
        let s = schemas();
        let def = s.find(b"004010", b"850").unwrap();
        let c: Value = serde_json::json!({"BEG": {"purpose_01": "00", "numbr_02": "1"}});
        let e = segments(def, &c, "set 1").unwrap_err();
        assert_eq!(e.0, "set 1/BEG");
        assert!(e.1.contains("numbr_02"), "{}", e.1);
        let c: Value = serde_json::json!({"PO1_loop": {"PO1": {}}});
        let e = segments(def, &c, "set 1").unwrap_err();
        assert!(e.1.contains("array"), "{}", e.1);
    }
}
