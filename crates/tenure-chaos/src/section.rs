//! The critical section of one acquisition: read every resource, then write
//! what was read + 1 with the fence. Every step goes to the history. Shared by
//! the in-process clients and the `rmw` writer of `tenure run` processes.

use crate::history::{Event, History, Kind, Op};
use crate::resource::{Outcome, Resource};

/// A value read in the section: `(index of the resource, resource name, value)`.
pub type Read = (usize, String, u64);

/// One holder's critical section, as it is recorded.
#[derive(Debug, Clone, Copy)]
pub struct Section<'a> {
    /// The history.
    pub history: &'a History,
    /// The client's name.
    pub client: &'a str,
    /// The acquisition's id.
    pub lease: &'a str,
    /// Its fencing token.
    pub fence: u64,
}

impl Section<'_> {
    fn event(&self, op: Op, kind: Kind, name: &str) -> Event {
        Event::new(self.client, op, kind)
            .key(name)
            .held(self.fence, self.lease)
    }

    /// Reads resource `{key}/{kind}` of each of `resources`; the values read.
    pub async fn read_all(&self, key: &str, resources: &mut [(String, Resource)]) -> Vec<Read> {
        let h = self.history;
        let mut reads = Vec::new();
        for (i, (kind, r)) in resources.iter_mut().enumerate() {
            let name = format!("{key}/{kind}");
            h.record(&self.event(Op::Read, Kind::Invoke, &name));
            match r.read(&name).await {
                Ok(v) => {
                    h.record(&self.event(Op::Read, Kind::Ok, &name).value(v));
                    reads.push((i, name, v));
                }
                Err(e) => h.record(
                    &Event::new(self.client, Op::Read, Kind::Info)
                        .key(&name)
                        .note(e),
                ),
            }
        }
        reads
    }

    /// Writes each value of `reads` + 1 with the fence, to the resource it was read from.
    pub async fn write_all(&self, reads: Vec<Read>, resources: &mut [(String, Resource)]) {
        for (i, name, v) in reads {
            let Some((_, r)) = resources.get_mut(i) else {
                continue;
            };
            let mut e = self.event(Op::Write, Kind::Invoke, &name).value(v + 1);
            e.read = Some(v);
            self.history.record(&e);
            let done = match r.write(&name, self.fence, v + 1).await {
                Ok(Outcome::Applied) => self.event(Op::Write, Kind::Ok, &name),
                Ok(Outcome::Refused) => self.event(Op::Write, Kind::Fail, &name),
                Err(e) => self.event(Op::Write, Kind::Info, &name).note(e),
            };
            self.history.record(&done);
        }
    }
}
