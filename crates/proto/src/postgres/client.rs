//! Frontend messages: startup, Query, the extended protocol, COPY data,
//! function calls. Each one that the server answers becomes a `Wait`.

use super::bind::{BindParser, Prepared, MAX_NAME};
use super::frame::{CANCEL_REQUEST, GSSENC_REQUEST, SSL_REQUEST};
use super::queue::{Before, Pending, Wait};
use super::{prepared_before, shown_name};
use super::{PgAnalyzer, FUNCTION_CALL, LOST_TEXT, MAX_QUERY_STATEMENTS, MAX_QUERY_TEXT};
use crate::digest::ParamDigest;
use crate::normalize;
use crate::trace_context;
use crate::Span;
use whyslow_model::{SmolStr, TraceId};

/// Cut the buffer at its first NUL: (C string, rest after the NUL).
fn cstr(b: &[u8]) -> (&[u8], &[u8]) {
    match b.iter().position(|&c| c == 0) {
        Some(i) => (&b[..i], &b[i + 1..]),
        None => (b, &[]),
    }
}

/// The statement's shape and digest, without its sqlcommenter comment (which
/// differs per request), and the trace id that comment carried.
fn normalized(text: &[u8]) -> (SmolStr, ParamDigest, Option<Traced>) {
    let mut d = ParamDigest::new();
    let text = crate::lossy_text(text);
    let (rest, comment) = trace_context::split_sql_comment(&text);
    let label = normalize::sql(&rest, &mut d);
    (
        label.into(),
        d,
        comment.map(|c| c.trace.map(|t| t.trace_id)),
    )
}

/// A sqlcommenter comment's trace id, or what was wrong with it.
type Traced = Result<TraceId, &'static str>;

impl PgAnalyzer {
    pub(super) fn client_start(&mut self, kind: u8, body: u32, code: u32) {
        let cap = match kind {
            b'Q' => MAX_QUERY_TEXT,
            b'P' => MAX_QUERY_TEXT + MAX_NAME + 1,
            b'D' | b'C' => MAX_NAME + 2,
            b'E' => MAX_NAME + 5,
            _ => 0,
        };
        self.cmsg.start(kind, code, body, cap);
        if kind == b'B' {
            self.cmsg.bind = Some(BindParser::new());
        }
    }

    pub(super) fn client_body(&mut self, b: &[u8]) {
        match self.cmsg.bind.as_mut() {
            Some(p) if !self.cmsg.damaged => p.feed(b, &self.statements),
            Some(_) => {}
            None => self.cmsg.keep(b),
        }
    }

    pub(super) fn client_end(&mut self) {
        let span = std::mem::take(&mut self.cmsg.span);
        let kind = self.cmsg.kind;
        // Messages that add a wait (and, the first five, an exchange).
        let more = match kind {
            b'Q' | b'P' | b'B' | b'E' | b'F' => Some(1),
            b'D' | b'C' | b'S' => Some(0),
            _ => None,
        };
        if more.is_some_and(|m| self.queue.full(m)) {
            self.overflow();
        }
        match kind {
            0 => self.startup(),
            b'Q' => self.query(span),
            b'P' => self.parse(span),
            b'B' => self.bind(span),
            b'D' => {
                let ex = self.building;
                self.add_request(ex, &span);
                self.queue.wait(Wait::Describe(ex));
            }
            b'E' => self.execute(span),
            b'C' => self.close(),
            b'S' => {
                self.close_building();
                let ex = self.last_exec.take();
                self.queue.wait(Wait::Sync(ex));
            }
            b'F' => {
                self.close_building();
                let ex = self.new_exchange(FUNCTION_CALL.into(), None, span);
                self.queue.wait(Wait::Function(ex));
            }
            b'd' | b'c' | b'f' => {
                let ex = self.copy_in;
                self.add_request(ex, &span);
                if kind != b'd' {
                    self.copy_in = None;
                }
            }
            // Flush, Terminate, password/SASL (never kept).
            _ => {}
        }
    }

    /// Too many requests without answers: pair nothing more until the
    /// server is ready again, and let the unanswered ones go.
    fn overflow(&mut self) {
        self.note("too many requests without a response; resynchronizing");
        self.close_building();
        self.last_exec = None;
        self.copy_in = None;
        self.queue.forget_waits();
        self.server_discard = true;
        self.emit(true);
    }

    fn startup(&mut self) {
        match self.cmsg.code {
            SSL_REQUEST | GSSENC_REQUEST => {
                self.negotiating = self.cmsg.code;
                self.server.expect_byte();
                self.client.expect_startup();
            }
            CANCEL_REQUEST => {
                // The connection carries nothing else.
                self.client.stop();
                self.server.stop();
            }
            _ => self.queue.wait(Wait::Startup),
        }
    }

    fn add_request(&mut self, ex: Option<u64>, span: &Span) {
        if let Some(p) = ex.and_then(|id| self.queue.get(id)) {
            p.req.merge(span);
        }
    }

    fn new_exchange(&mut self, label: SmolStr, digest: Option<ParamDigest>, span: Span) -> u64 {
        self.queue.push(Pending {
            label: Some(label),
            digest,
            req: span,
            executed: true,
            ..Pending::default()
        })
    }

    /// The extended-protocol exchange the next Parse/Bind joins: a new one
    /// when the current one already has that message.
    fn building_for(&mut self, bind: bool) -> u64 {
        if let Some(id) = self.building {
            if let Some(p) = self.queue.get(id) {
                if !p.has_bind && (bind || !p.has_parse) {
                    return id;
                }
            }
        }
        self.close_building();
        let id = self.queue.push(Pending {
            open: true,
            ..Pending::default()
        });
        self.building = Some(id);
        id
    }

    pub(super) fn close_building(&mut self) {
        if let Some(p) = self.building.take().and_then(|id| self.queue.get(id)) {
            p.open = false;
        }
    }

    fn query(&mut self, span: Span) {
        self.close_building();
        if self.cmsg.cut {
            self.note(format!(
                "query text longer than {MAX_QUERY_TEXT} bytes: cut"
            ));
        }
        let mut labels: Vec<(SmolStr, Option<ParamDigest>)> = Vec::new();
        let mut traced = None;
        if self.cmsg.damaged {
            labels.push((LOST_TEXT.into(), None));
        } else {
            // Read where it was kept: valid UTF-8 (nearly every query) is
            // borrowed, not copied.
            let text = crate::lossy_text(cstr(&self.cmsg.buf).0);
            let (text, comment) = trace_context::split_sql_comment(&text);
            traced = comment.map(|c| c.trace.map(|t| t.trace_id));
            for stmt in normalize::split_sql(&text)
                .into_iter()
                .take(MAX_QUERY_STATEMENTS)
            {
                let mut d = ParamDigest::new();
                let label = self.shapes.sql(stmt, &mut d);
                labels.push((label, Some(d)));
            }
        }
        let trace = traced.and_then(|c| self.traced(c));
        if self.queue.full(labels.len()) {
            self.overflow();
        }
        let count = labels.len() as u32;
        let mut first = None;
        for (label, digest) in labels {
            let id = self.queue.push(Pending {
                label: Some(label),
                digest,
                req: span,
                executed: true,
                holds: 1,
                trace,
                ..Pending::default()
            });
            first.get_or_insert(id);
        }
        // An empty query string makes no exchange (`count` 0).
        let first = first.unwrap_or(0);
        self.queue.wait(Wait::Query {
            first,
            count,
            at: 0,
            failed: false,
        });
    }

    fn parse(&mut self, span: Span) {
        let (name, rest) = cstr(&self.cmsg.buf);
        let name = name.to_vec();
        let (label, digest, comment) = if self.cmsg.damaged {
            (LOST_TEXT.into(), ParamDigest::new(), None)
        } else {
            normalized(cstr(rest).0)
        };
        // The comment differs per request, so a client that keeps named
        // statements by their text runs this one only for that request's
        // trace: its Binds carry the trace too.
        let trace = comment.and_then(|c| self.traced(c));
        if self.cmsg.cut {
            self.note(format!(
                "query text longer than {MAX_QUERY_TEXT} bytes: cut"
            ));
        }
        let prepared = Prepared {
            label: label.clone(),
            digest: digest.clone(),
            trace,
        };
        self.statements.insert(&name, prepared);
        let id = self.building_for(false);
        if let Some(p) = self.queue.get(id) {
            p.has_parse = true;
            p.trace = trace;
            p.label = Some(label);
            p.digest = Some(digest);
            p.req.merge(&span);
        }
        self.queue.wait(Wait::Parse(Some(id)));
    }

    fn bind(&mut self, span: Span) {
        let parser = self.cmsg.bind.take().unwrap_or_else(BindParser::new);
        let damaged = self.cmsg.damaged || !parser.complete;
        let mut before = None;
        let (label, trace) = match self.statements.get(&parser.statement) {
            Some(s) => (s.label.clone(), s.trace),
            None => {
                let params = parser.complete.then_some(parser.params);
                if !parser.statement.is_empty() {
                    before = Some(Before {
                        name: shown_name(&parser.statement),
                        params,
                    });
                }
                (prepared_before(&parser.statement, params), None)
            }
        };
        let digest = parser.digest.filter(|_| !damaged);
        if let Some(d) = &digest {
            let portal = Prepared {
                label: label.clone(),
                digest: d.clone(),
                trace,
            };
            self.portals.insert(&parser.portal, portal);
        }
        let id = self.building_for(true);
        if let Some(p) = self.queue.get(id) {
            p.has_bind = true;
            p.trace = p.trace.or(trace);
            p.label = Some(label);
            p.before = before;
            p.digest = digest;
            p.req.merge(&span);
        }
        self.queue.wait(Wait::Bind(Some(id)));
    }

    fn execute(&mut self, span: Span) {
        let portal = cstr(&self.cmsg.buf).0.to_vec();
        let id = match self.building.take() {
            Some(id) => id,
            None => self.queue.push(Pending::default()),
        };
        let known = self.portals.get(&portal).cloned();
        if let Some(p) = self.queue.get(id) {
            if p.label.is_none() || !p.has_bind {
                // Execute again of an open portal (after PortalSuspended).
                if let Some(k) = known {
                    p.label = Some(k.label);
                    p.digest = Some(k.digest);
                    p.trace = p.trace.or(k.trace);
                }
            }
            p.req.merge(&span);
            p.open = false;
            p.executed = true;
        }
        self.last_exec = Some(id);
        self.queue.wait(Wait::Execute(id));
    }

    /// The trace id of a comment, noting once a malformed one.
    fn traced(&mut self, comment: Traced) -> Option<TraceId> {
        comment
            .map_err(|why| self.note(format!("{why}: its statement is attributed without it")))
            .ok()
    }

    fn close(&mut self) {
        let (what, name) = self.cmsg.buf.split_first().unwrap_or((&0, &[]));
        let name = cstr(name).0;
        match what {
            b'S' => self.statements.remove(name),
            b'P' => self.portals.remove(name),
            _ => {}
        }
        self.queue.wait(Wait::Close);
    }
}
