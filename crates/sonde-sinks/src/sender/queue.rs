//! Where a sender keeps requests between encoding them and a backend
//! accepting them: [`Memory`] here, [`super::disk::Disk`] on disk.

use std::collections::VecDeque;
use std::io;

/// One encoded, compressed request body, ready to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The body as sent (after compression).
    pub body: Vec<u8>,
    /// Points in the body.
    pub points: u32,
    /// The body's size before compression.
    pub raw_bytes: u32,
}

/// What a [`Queue::push`] had to throw away to stay within its size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Requests dropped, oldest first.
    pub batches: u64,
    /// Points in them.
    pub points: u64,
}

/// A bounded FIFO of requests. The sender drives it: it pushes requests as
/// it seals them, reads the oldest with [`Queue::front`] and removes it with
/// [`Queue::pop`] only once the backend has accepted it (or refused it for
/// good), so a request stays queued across retries.
pub trait Queue: Send {
    /// Appends `r`. When the queue would grow past its size, the oldest
    /// requests are dropped and returned as counts; receiving never waits.
    ///
    /// # Errors
    ///
    /// When a disk queue cannot write `r` (the request is then lost and the
    /// caller counts it).
    fn push(&mut self, r: Request) -> io::Result<Dropped>;

    /// The oldest request, if any.
    ///
    /// # Errors
    ///
    /// When a disk queue cannot read it back.
    fn front(&mut self) -> io::Result<Option<&Request>>;

    /// Removes the oldest request: it was delivered or refused.
    ///
    /// # Errors
    ///
    /// When a disk queue cannot record the removal.
    fn pop(&mut self) -> io::Result<()>;

    /// Requests queued.
    fn len(&self) -> usize;

    /// True when nothing is queued.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes queued (bodies as sent, plus a disk queue's record headers).
    fn bytes(&self) -> u64;

    /// Points queued.
    fn points(&self) -> u64;

    /// What a stop now would lose: the requests only in memory (all of a
    /// memory queue's; a disk queue's that the disk could not take, after
    /// one more try to write them).
    fn volatile(&mut self) -> Dropped;
}

/// The in-memory queue: a deque bounded by the bytes of its bodies.
#[derive(Debug)]
pub struct Memory {
    queue: VecDeque<Request>,
    max_bytes: u64,
    bytes: u64,
    points: u64,
}

impl Memory {
    /// An empty queue holding at most `max_bytes` of bodies (always at
    /// least the newest request, however large).
    pub fn new(max_bytes: u64) -> Memory {
        Memory {
            queue: VecDeque::new(),
            max_bytes,
            bytes: 0,
            points: 0,
        }
    }
}

impl Queue for Memory {
    fn push(&mut self, r: Request) -> io::Result<Dropped> {
        self.bytes += r.body.len() as u64;
        self.points += u64::from(r.points);
        self.queue.push_back(r);
        let mut dropped = Dropped::default();
        while self.bytes > self.max_bytes && self.queue.len() > 1 {
            let old = self.queue.pop_front().expect("more than one queued");
            self.bytes -= old.body.len() as u64;
            self.points -= u64::from(old.points);
            dropped.batches += 1;
            dropped.points += u64::from(old.points);
        }
        Ok(dropped)
    }

    fn front(&mut self) -> io::Result<Option<&Request>> {
        Ok(self.queue.front())
    }

    fn pop(&mut self) -> io::Result<()> {
        if let Some(old) = self.queue.pop_front() {
            self.bytes -= old.body.len() as u64;
            self.points -= u64::from(old.points);
        }
        Ok(())
    }

    fn len(&self) -> usize {
        self.queue.len()
    }

    fn bytes(&self) -> u64 {
        self.bytes
    }

    fn points(&self) -> u64 {
        self.points
    }

    fn volatile(&mut self) -> Dropped {
        Dropped {
            batches: self.queue.len() as u64,
            points: self.points,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn req(n: u8, size: usize) -> Request {
        Request {
            body: vec![n; size],
            points: u32::from(n),
            raw_bytes: size as u32 * 2,
        }
    }

    #[test]
    fn keeps_order_and_drops_the_oldest_past_its_size() {
        let mut q = Memory::new(250);
        assert_eq!(q.push(req(1, 100)).unwrap(), Dropped::default());
        assert_eq!(q.push(req(2, 100)).unwrap(), Dropped::default());
        let d = q.push(req(3, 100)).unwrap();
        assert_eq!(
            d,
            Dropped {
                batches: 1,
                points: 1
            }
        );
        assert_eq!((q.len(), q.bytes(), q.points()), (2, 200, 5));
        assert_eq!(q.front().unwrap().unwrap().body[0], 2);
        q.pop().unwrap();
        assert_eq!(q.front().unwrap().unwrap().body[0], 3);
        q.pop().unwrap();
        assert!(q.front().unwrap().is_none());
        assert_eq!((q.len(), q.bytes(), q.points()), (0, 0, 0));
    }

    #[test]
    fn an_oversized_request_still_goes_through() {
        let mut q = Memory::new(10);
        q.push(req(1, 5)).unwrap();
        let d = q.push(req(2, 50)).unwrap();
        assert_eq!(d.batches, 1);
        assert_eq!(q.len(), 1);
        assert_eq!(q.front().unwrap().unwrap().body.len(), 50);
    }
}
