//! When each traced thread was started, by which thread, and when it ended:
//! what says a thread was started for one request and ended with it (a
//! per-request executor's), or lives on to serve others (a pool's).
//!
//! Thread ids are reused once the kernel's pid space wraps, so a thread may
//! have several lives; a call belongs to the life it fell in.

use crate::event::{Kind, SockEvent};
use crate::join::{capture_us, CLOCK_SLACK_US};
use foldhash::HashMap;
use whyslow_model::{Thread, ThreadStart};

/// Starters followed up the chain (a thread started by a thread started by
/// a handler): a few levels are real; a longer chain is a loop of reused
/// ids, not a thread tree.
const MAX_CHAIN: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Life {
    started_us: u64,
    by: Thread,
    ended_us: Option<u64>,
}

/// The lives of the threads seen started, by thread.
#[derive(Debug, Default)]
pub struct ThreadLives {
    lives: HashMap<Thread, Vec<Life>>,
}

impl ThreadLives {
    pub fn new(events: &[SockEvent], clock_offset_ns: i64) -> Self {
        let mut lives: HashMap<Thread, Vec<Life>> = HashMap::default();
        let mut ends: HashMap<Thread, Vec<u64>> = HashMap::default();
        for e in events {
            let at = capture_us(e.enter_ns, clock_offset_ns);
            match e.kind {
                // A new process (pid == tid) is a fork: its parent's
                // process is not in the record, and a forked worker serves
                // requests of its own.
                Kind::NewThread { parent } if e.thread.pid != e.thread.tid => {
                    let by = Thread {
                        pid: e.thread.pid,
                        tid: parent,
                    };
                    lives.entry(e.thread).or_default().push(Life {
                        started_us: at,
                        by,
                        ended_us: None,
                    });
                }
                Kind::ThreadEnd => ends.entry(e.thread).or_default().push(at),
                _ => {}
            }
        }
        for (thread, list) in lives.iter_mut() {
            list.sort_unstable_by_key(|l| l.started_us);
            let Some(ends) = ends.get_mut(thread) else {
                continue;
            };
            ends.sort_unstable();
            // Each life ends at the first end after its start, before the
            // next life of the same id began.
            let next: Vec<u64> = list.iter().skip(1).map(|l| l.started_us).collect();
            for (k, life) in list.iter_mut().enumerate() {
                let i = ends.partition_point(|&x| x < life.started_us);
                life.ended_us = ends
                    .get(i)
                    .copied()
                    .filter(|&x| next.get(k).is_none_or(|&n| x <= n));
            }
        }
        ThreadLives { lives }
    }

    /// The life of `thread` that `at_us` fell in, if it was seen started.
    fn life_at(&self, thread: Thread, at_us: u64) -> Option<Life> {
        let list = self.lives.get(&thread)?;
        let k = list.partition_point(|l| l.started_us <= at_us + CLOCK_SLACK_US);
        let life = *list[..k].last()?;
        life.ended_us
            .is_none_or(|end| at_us <= end + CLOCK_SLACK_US)
            .then_some(life)
    }

    /// How the thread that made a call at `at_us` came to be: its starter,
    /// its starter's starter, … nearest first, each with when it started
    /// the chain below it and when the last thread of that chain ended.
    /// Empty when the thread was not seen started.
    pub fn starters(&self, thread: Thread, at_us: u64) -> Vec<ThreadStart> {
        let mut out: Vec<ThreadStart> = Vec::new();
        let (mut thread, mut at_us) = (thread, at_us);
        while out.len() < MAX_CHAIN {
            let Some(life) = self.life_at(thread, at_us) else {
                break;
            };
            let below = out.last().map_or(life.ended_us, |s| s.ended_us);
            out.push(ThreadStart {
                by: life.by,
                at_us: life.started_us,
                ended_us: below.zip(life.ended_us).map(|(a, b)| a.max(b)),
            });
            (thread, at_us) = (life.by, life.started_us);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: Kind, tid: u32, at_us: u64) -> SockEvent {
        SockEvent {
            enter_ns: at_us * 1000,
            exit_ns: at_us * 1000,
            thread: Thread { pid: 1, tid },
            kind,
            bytes: 0,
            seq: 0,
            fd: -1,
            local: None,
            remote: None,
            unix: None,
            comm: String::new(),
            payload: Vec::new(),
        }
    }

    fn thread(tid: u32) -> Thread {
        Thread { pid: 1, tid }
    }

    #[test]
    fn a_thread_started_by_a_thread_started_by_a_handler_names_both_starters() {
        use Kind::*;
        let events = [
            event(NewThread { parent: 10 }, 11, 1_000),
            event(NewThread { parent: 11 }, 12, 1_100),
            event(ThreadEnd, 12, 1_900),
            event(ThreadEnd, 11, 2_000),
        ];
        let lives = ThreadLives::new(&events, 0);
        let start = |by, at_us, ended_us| ThreadStart {
            by: thread(by),
            at_us,
            ended_us,
        };
        assert_eq!(
            lives.starters(thread(12), 1_500),
            vec![start(11, 1_100, Some(1_900)), start(10, 1_000, Some(2_000))]
        );
        // The handler itself was not seen started.
        assert!(lives.starters(thread(10), 1_500).is_empty());
    }

    #[test]
    fn a_thread_that_outlived_the_capture_has_no_end_and_a_reused_id_a_life_of_its_own() {
        use Kind::*;
        let events = [
            event(NewThread { parent: 10 }, 11, 1_000),
            event(ThreadEnd, 11, 2_000),
            // The id again, started by another thread, never ended.
            event(NewThread { parent: 20 }, 11, 50_000),
            // A forked process: not a thread of its parent's.
            event(NewThread { parent: 10 }, 1, 3_000),
        ];
        let lives = ThreadLives::new(&events, 0);
        assert_eq!(lives.starters(thread(11), 1_500)[0].by, thread(10));
        // Between its two lives the id made no call it could.
        assert!(lives.starters(thread(11), 10_000).is_empty());
        let second = lives.starters(thread(11), 60_000)[0];
        assert_eq!((second.by, second.ended_us), (thread(20), None));
        assert!(lives.starters(Thread { pid: 1, tid: 1 }, 4_000).is_empty());
    }

    #[test]
    fn a_loop_of_starters_is_cut() {
        use Kind::*;
        let events = [
            event(NewThread { parent: 12 }, 11, 1_000),
            event(NewThread { parent: 11 }, 12, 1_000),
        ];
        let lives = ThreadLives::new(&events, 0);
        assert_eq!(lives.starters(thread(11), 1_500).len(), MAX_CHAIN);
    }
}
