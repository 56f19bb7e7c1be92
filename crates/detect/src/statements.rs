//! Statements prepared by name before the capture, told the same across
//! connections. A client that names its statements per connection
//! (tokio-postgres numbers them process-wide: `s12` on one connection is
//! `s41` on the next) gives one statement as many names as it has
//! connections, and every count per statement (n_plus_one, duplicate_calls,
//! the SQL summary) splits as many ways. The wire never shows such a
//! statement's text; it shows its shape (parameters, columns, verb:
//! `whyslow_model::prepared`) and where it runs among the others on its
//! connection. Names on two connections are one statement when their
//! shapes and their places agree: colour refinement over each connection's
//! sequence, a statement's colour being its shape (its text, where the
//! capture saw it), then also the colours of the statements run right
//! before and after it. A colour two names hold on one connection tells
//! nothing (two statements of one shape in like places) and joins nothing.
//! Two code paths that run different statements of one shape in the same
//! places cannot be told apart this way: they are joined.
//!
//! Labels hold over a capture's windows: a name once joined keeps the label
//! its statement was given first (`Copies`).

use foldhash::{HashMap, HashMapExt};
use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use whyslow_model::prepared::{prepared_parts, with_copies};
use whyslow_model::{Exchange, SmolStr, Timeline};

/// Rounds of refinement: a statement's place as far as three statements
/// before and after it. Enough to part the statements of a checkout (a
/// query, a loop of another, a commit); more only costs time.
const ROUNDS: usize = 3;
/// Share of the rarer of two statements' runs that must follow each other
/// for the one to count as the other's neighbour: code runs its statements
/// in the same order every time, while an exchange the capture lost makes
/// its two neighbours adjacent once per loss (1 % of packets lost left
/// nearly every statement of orm-storm a neighbour it never has).
const NEIGHBOUR_MIN_SHARE: f64 = 0.1;
/// Names remembered across windows (name, connection): a client with a
/// thousand statements on a hundred connections fits; past it, later names
/// are joined within their window only.
const JOINED_MAX: usize = 1 << 17;

/// A statement on one connection: (connection, its label in the window).
type Key = (u32, SmolStr);
/// A statement's name on one connection: (connection, name).
type Named = (u32, SmolStr);

/// Names joined so far, with the label each was given.
#[derive(Default)]
pub struct Copies {
    joined: HashMap<Named, SmolStr>,
    /// Per label given, the name it stands for on each connection: a label
    /// stands for one name on a connection, or it would make two
    /// statements one; and one label is given to one class.
    held: HashMap<SmolStr, HashMap<u32, SmolStr>>,
}

struct Node {
    key: Key,
    /// Its name, for a statement prepared before the capture.
    name: Option<SmolStr>,
    color: u64,
    before: Vec<usize>,
    after: Vec<usize>,
}

fn hash_of(v: impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

impl Copies {
    /// Gives each SQL statement of `t` known under other names on
    /// other connections one label for all of them.
    pub fn relabel(&mut self, t: &mut Timeline) {
        let is_sql = |e: &&Exchange| e.protocol.is_sql();
        if !t
            .exchanges
            .iter()
            .filter(is_sql)
            .any(|e| prepared_parts(&e.request).is_some())
        {
            return;
        }
        same_name_same_label(t);
        let mut nodes = nodes_of(t);
        refine(&mut nodes);
        let mut labels: HashMap<Key, SmolStr> = HashMap::new();
        for class in classes(&nodes).values() {
            let members: Vec<&Node> = class.iter().map(|&i| &nodes[i]).collect();
            self.join(&members, &mut labels);
        }
        each_prepared(t, |e, named| {
            let key = (e.connection, e.request.clone());
            if let Some(l) = labels.get(&key).or_else(|| self.joined.get(&named)) {
                e.request = l.clone();
            }
        });
    }

    /// One label for the names of a class: the one any of them was given
    /// before, else a new one from a name of theirs no other class's label
    /// took. Names given two labels before are left as they are, and so is
    /// a name whose connection has another name under that label.
    fn join(&mut self, members: &[&Node], labels: &mut HashMap<Key, SmolStr>) {
        let named = |n: &Node| (n.key.0, n.name.clone().unwrap_or_default());
        let mut given: Vec<&SmolStr> = members
            .iter()
            .filter_map(|n| self.joined.get(&named(n)))
            .collect();
        given.sort_unstable();
        given.dedup();
        let label = match given.as_slice() {
            [] if members.iter().all(|n| n.name == members[0].name) => return,
            [] => {
                let mut keys: Vec<&Key> = members.iter().map(|n| &n.key).collect();
                keys.sort_unstable();
                let fresh = keys
                    .iter()
                    .filter_map(|k| with_copies(&k.1))
                    .find(|l| !self.held.contains_key(l));
                match fresh {
                    Some(l) => l,
                    None => return,
                }
            }
            [one] => (*one).clone(),
            _ => return,
        };
        for n in members {
            let (conn, name) = named(n);
            let known = self.joined.contains_key(&(conn, name.clone()));
            if !known && self.joined.len() >= JOINED_MAX {
                continue;
            }
            let names = self.held.entry(label.clone()).or_default();
            if names.get(&conn).is_some_and(|other| *other != name) {
                continue;
            }
            names.insert(conn, name.clone());
            self.joined.insert((conn, name), label.clone());
            labels.insert(n.key.clone(), label.clone());
        }
    }
}

/// One name on one connection is one statement, whatever its executions'
/// answers showed: the label that shows the most (an execution whose answer
/// the capture missed, or that returned no rows, shows less) for all.
fn same_name_same_label(t: &mut Timeline) {
    let mut fullest: HashMap<(u32, &str), &SmolStr> = HashMap::new();
    for e in t.exchanges.iter().filter(|e| e.protocol.is_sql()) {
        if let Some((name, rest)) = prepared_parts(&e.request) {
            let best = fullest.entry((e.connection, name)).or_insert(&e.request);
            if rest.len() > prepared_parts(best).map_or(0, |p| p.1.len()) {
                *best = &e.request;
            }
        }
    }
    let relabel: HashMap<(u32, SmolStr), SmolStr> = fullest
        .into_iter()
        .map(|((conn, name), l)| ((conn, SmolStr::from(name)), l.clone()))
        .collect();
    each_prepared(t, |e, named| {
        if let Some(l) = relabel.get(&named) {
            if *l != e.request {
                e.request = l.clone();
            }
        }
    });
}

/// Calls `f` on each SQL exchange of a statement prepared before the
/// capture, with its (connection, name).
fn each_prepared(t: &mut Timeline, mut f: impl FnMut(&mut Exchange, Named)) {
    for e in t.exchanges.iter_mut().filter(|e| e.protocol.is_sql()) {
        if let Some((name, _)) = prepared_parts(&e.request) {
            let named = (e.connection, SmolStr::from(name));
            f(e, named);
        }
    }
}

/// One node per statement and connection, linked to the statements run
/// right before and after it there, coloured by shape or text.
fn nodes_of(t: &Timeline) -> Vec<Node> {
    let mut order: Vec<&Exchange> = t.exchanges.iter().filter(|e| e.protocol.is_sql()).collect();
    order.sort_by_key(|e| (e.connection, e.request_first_at_us, e.id));
    let mut index: HashMap<Key, usize> = HashMap::new();
    let mut nodes: Vec<Node> = Vec::new();
    let mut seen: Vec<u32> = Vec::new();
    let mut pairs: HashMap<(usize, usize), u32> = HashMap::new();
    let mut prev: Option<(u32, usize)> = None;
    for e in order {
        let key = (e.connection, e.request.clone());
        let i = *index.entry(key.clone()).or_insert_with(|| {
            let (name, color) = match prepared_parts(&e.request) {
                Some((name, shape)) => (Some(SmolStr::from(name)), hash_of(("shape", shape))),
                None => (None, hash_of(("text", e.request.as_str()))),
            };
            nodes.push(Node {
                key,
                name,
                color,
                before: Vec::new(),
                after: Vec::new(),
            });
            seen.push(0);
            nodes.len() - 1
        });
        seen[i] += 1;
        if let Some((_, p)) = prev.filter(|p| p.0 == e.connection) {
            *pairs.entry((p, i)).or_default() += 1;
        }
        prev = Some((e.connection, i));
    }
    let mut pairs: Vec<((usize, usize), u32)> = pairs.into_iter().collect();
    pairs.sort_unstable();
    for ((a, b), n) in pairs {
        if f64::from(n) >= NEIGHBOUR_MIN_SHARE * f64::from(seen[a].min(seen[b])) {
            nodes[a].after.push(b);
            nodes[b].before.push(a);
        }
    }
    nodes
}

/// Colours each node by its own and its neighbours' colours, `ROUNDS` times.
fn refine(nodes: &mut [Node]) {
    for _ in 0..ROUNDS {
        let colors: Vec<u64> = nodes.iter().map(|n| n.color).collect();
        let around = |list: &[usize]| {
            let mut c: Vec<u64> = list.iter().map(|&j| colors[j]).collect();
            c.sort_unstable();
            c.dedup();
            c
        };
        for n in nodes.iter_mut() {
            n.color = hash_of((n.color, around(&n.before), around(&n.after)));
        }
    }
}

/// Named nodes by final colour, where the colour is one name's on each
/// connection, and held on two connections at least.
fn classes(nodes: &[Node]) -> BTreeMap<u64, Vec<usize>> {
    let mut per_conn: HashMap<(u64, u32), usize> = HashMap::new();
    for n in nodes.iter().filter(|n| n.name.is_some()) {
        *per_conn.entry((n.color, n.key.0)).or_default() += 1;
    }
    let mut out: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        if n.name.is_some() && per_conn[&(n.color, n.key.0)] == 1 {
            out.entry(n.color).or_default().push(i);
        }
    }
    out.retain(|_, v| v.len() > 1);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::exchange;
    use whyslow_model::prepared::{prepared_label, PreparedShape};
    use whyslow_model::Protocol;

    fn shape(params: u16, columns: Option<u16>, verb: &'static str) -> PreparedShape<'static> {
        PreparedShape {
            params: Some(params),
            columns,
            verb: Some(verb),
        }
    }

    /// A checkout's statements: a query, a loop of another, a commit.
    fn checkout() -> [PreparedShape<'static>; 3] {
        [
            shape(1, Some(3), "SELECT"),
            shape(1, Some(2), "SELECT"),
            shape(0, None, "COMMIT"),
        ]
    }

    /// `rounds` runs of statements `names` (with `shapes`) on `conn`,
    /// the second one `loops` times a run, from exchange `id` on.
    fn runs(
        t: &mut Timeline,
        conn: u32,
        names: [&str; 3],
        shapes: [PreparedShape; 3],
        rounds: u64,
    ) {
        let mut at = u64::from(conn) * 7;
        for _ in 0..rounds {
            for (k, (name, sh)) in names.iter().zip(shapes).enumerate() {
                for _ in 0..if k == 1 { 4 } else { 1 } {
                    let id = t.exchanges.len() as u32;
                    let mut e = exchange(id, conn, (at, at + 10), (at + 50, at + 60));
                    e.protocol = Protocol::Postgres;
                    e.request = prepared_label(name, sh);
                    t.exchanges.push(e);
                    at += 100;
                }
            }
        }
    }

    fn labels_on(t: &Timeline, conn: u32) -> Vec<String> {
        let mut l: Vec<String> = t
            .exchanges
            .iter()
            .filter(|e| e.connection == conn)
            .map(|e| e.request.to_string())
            .collect();
        l.dedup();
        l
    }

    #[test]
    fn one_statement_named_per_connection_gets_one_label() {
        let mut t = Timeline::default();
        runs(&mut t, 1, ["s9", "s10", "s11"], checkout(), 3);
        runs(&mut t, 2, ["s20", "s21", "s22"], checkout(), 2);
        Copies::default().relabel(&mut t);
        let one = labels_on(&t, 1);
        assert_eq!(labels_on(&t, 2)[..3], one[..3], "{one:?}");
        assert!(
            one[1].starts_with("? (statement s10 and its copies on other connections, 1 parameter"),
            "{one:?}"
        );
    }

    #[test]
    fn other_shapes_or_places_are_other_statements() {
        let mut t = Timeline::default();
        runs(&mut t, 1, ["s9", "s10", "s11"], checkout(), 2);
        let mut other = checkout();
        other[1].columns = Some(5);
        runs(&mut t, 2, ["s20", "s21", "s22"], other, 2);
        let before: Vec<String> = t.exchanges.iter().map(|e| e.request.to_string()).collect();
        Copies::default().relabel(&mut t);
        let after: Vec<String> = t.exchanges.iter().map(|e| e.request.to_string()).collect();
        // s21 has five columns: it and its neighbours (whose places differ
        // now) stay apart.
        assert_eq!(after, before);
    }

    #[test]
    fn two_names_alike_on_one_connection_join_nothing() {
        let mut t = Timeline::default();
        // Two statements of one shape alternate between runs of a third.
        let same = shape(1, Some(2), "SELECT");
        let a = shape(0, Some(1), "SELECT");
        runs(&mut t, 1, ["a1", "x1", "a1"], [a, same, a], 1);
        runs(&mut t, 1, ["a1", "y1", "a1"], [a, same, a], 1);
        runs(&mut t, 1, ["a1", "x1", "a1"], [a, same, a], 1);
        runs(&mut t, 2, ["a2", "z2", "a2"], [a, same, a], 2);
        Copies::default().relabel(&mut t);
        let two = labels_on(&t, 2);
        assert!(two.iter().any(|l| l.contains("statement z2,")), "{two:?}");
    }

    #[test]
    fn a_name_whose_answer_was_missed_takes_the_label_of_its_other_executions() {
        let mut t = Timeline::default();
        runs(&mut t, 1, ["s9", "s10", "s11"], checkout(), 2);
        let bare = PreparedShape {
            params: Some(1),
            ..Default::default()
        };
        t.exchanges[0].request = prepared_label("s9", bare);
        Copies::default().relabel(&mut t);
        assert_eq!(t.exchanges[0].request, t.exchanges[6].request);
        assert!(t.exchanges[0].request.contains("→ 3 columns"));
    }

    #[test]
    fn an_exchange_the_capture_lost_does_not_part_copies() {
        let mut t = Timeline::default();
        runs(&mut t, 1, ["s9", "s10", "s11"], checkout(), 12);
        runs(&mut t, 2, ["s20", "s21", "s22"], checkout(), 12);
        // Conn 2 lost a COMMIT: its loop's last call ran right into the
        // next checkout's first query, once.
        let lost = t
            .exchanges
            .iter()
            .position(|e| e.connection == 2 && e.request.contains("s22"))
            .unwrap();
        t.exchanges.remove(lost);
        Copies::default().relabel(&mut t);
        let (one, two) = (labels_on(&t, 1), labels_on(&t, 2));
        assert!(two.iter().all(|l| one.contains(l)), "{one:?} {two:?}");
    }

    fn node(conn: u32, name: &str) -> Node {
        let label = prepared_label(name, checkout()[1]);
        Node {
            key: (conn, label),
            name: Some(name.into()),
            color: 0,
            before: Vec::new(),
            after: Vec::new(),
        }
    }

    #[test]
    fn two_classes_never_share_a_label() {
        let mut copies = Copies::default();
        let mut labels = HashMap::new();
        let x = [node(1, "S_1"), node(2, "S_3")];
        let y = [node(3, "S_1"), node(4, "S_2")];
        copies.join(&x.iter().collect::<Vec<_>>(), &mut labels);
        copies.join(&y.iter().collect::<Vec<_>>(), &mut labels);
        assert_ne!(labels[&x[0].key], labels[&y[0].key], "{labels:?}");
        assert_eq!(labels[&y[0].key], labels[&y[1].key]);
        // Nor does a label stand for two names on one connection.
        let z = [node(1, "S_9"), node(2, "S_3")];
        copies.join(&z.iter().collect::<Vec<_>>(), &mut labels);
        assert!(!labels.contains_key(&z[0].key), "{labels:?}");
    }

    /// Two windows relabelled by one `Copies`, each with two connections'
    /// checkout loops: (connection, statement names, answers show columns).
    fn two_windows(
        first: [(u32, [&str; 3], bool); 2],
        next: [(u32, [&str; 3], bool); 2],
    ) -> (Timeline, Timeline) {
        let mut copies = Copies::default();
        let mut window = |loops: [(u32, [&str; 3], bool); 2]| {
            let mut t = Timeline::default();
            for (conn, names, columns) in loops {
                let mut shapes = checkout();
                if !columns {
                    shapes.iter_mut().for_each(|s| s.columns = None);
                }
                runs(&mut t, conn, names, shapes, 2);
            }
            copies.relabel(&mut t);
            t
        };
        let first = window(first);
        (first, window(next))
    }

    #[test]
    fn a_label_holds_across_windows() {
        let ([s9, s20, s30], bare, full) = (
            [
                ["s9", "s10", "s11"],
                ["s20", "s21", "s22"],
                ["s30", "s31", "s32"],
            ],
            false,
            true,
        );
        // (first window, next window, connections of the next window whose
        // labels are connection 1's in the first)
        let cases = [
            // A name keeps its label when its answers show more later.
            (
                [(1, s9, bare), (2, s20, bare)],
                [(1, s9, full), (3, s30, full)],
                [1, 3],
            ),
            // A label holds across windows: for the connection seen again, and
            // for a new one running the same loop.
            (
                [(1, s9, full), (2, s20, full)],
                [(3, s30, full), (2, s20, full)],
                [3, 2],
            ),
        ];
        for (first, next, same) in cases {
            let (first, next) = two_windows(first, next);
            for conn in same {
                assert_eq!(labels_on(&next, conn), labels_on(&first, 1), "{conn}");
            }
        }
    }
}
