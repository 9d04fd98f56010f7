//! The threads of a contention replay: which replayed thread a trace's
//! thread id names, when a thread starts (at its creator's clock, named by a
//! spawn marker or guessed), and how a thread that joins another is held
//! until that one's end is replayed (see [`Contention::push`]), and one that
//! takes a lock another holds until that one's release is.

use super::*;

impl Contention {
    /// A new replayed thread for trace thread `tid`, named by a spawn marker:
    /// started, so that its events queue, and held until the spawn is
    /// replayed.
    #[cold]
    pub(super) fn spawned(&mut self, creator: usize, tid: u32) -> u32 {
        let c = self.new_slot(tid);
        let th = &mut self.threads[c];
        th.started = true;
        th.held = true;
        self.spawns.push((creator, tid, c as u32));
        c as u32
    }

    /// The replayed thread a join marker on `t` naming trace thread `tid`
    /// waits for: the latest `t` spawned with that id, else the thread the
    /// id named at its latest end.
    #[cold]
    pub(super) fn joined(&mut self, t: usize, tid: u32) -> Option<u32> {
        if let Some(i) = self.spawns.iter().rposition(|&(c, id, _)| c == t && id == tid) {
            return Some(self.spawns.remove(i).2);
        }
        self.ended.get(tid as usize).copied().filter(|&x| x != NO_SLOT)
    }

    /// Thread `t`, named `tid` in the trace, ends (recorded; its replay may
    /// come later): what a later join marker naming `tid` waits for.
    #[cold]
    pub(super) fn set_ended(&mut self, tid: u32, t: usize) {
        if self.ended.len() <= tid as usize {
            self.ended.resize(tid as usize + 1, NO_SLOT);
        }
        self.ended[tid as usize] = t as u32;
    }

    /// The replayed thread trace thread `tid` now names (a new one the
    /// first time).
    #[inline(always)]
    pub(super) fn slot(&mut self, tid: u32) -> usize {
        match self.slots.get(tid as usize) {
            Some(&s) if s != NO_SLOT => s as usize,
            _ => self.new_slot(tid),
        }
    }

    /// A new replayed thread for trace thread `tid`, from now on what it names.
    #[cold]
    pub(super) fn new_slot(&mut self, tid: u32) -> usize {
        let t = self.threads.len();
        if self.slots.len() <= tid as usize {
            self.slots.resize(tid as usize + 1, NO_SLOT);
        }
        self.slots[tid as usize] = t as u32;
        self.threads.push(Thread { tid, ..Thread::default() });
        if self.scope == Scope::Thread {
            self.trackers.push(Tracker::default());
        }
        t
    }

    /// Whether `ev`, thread `t`'s next event, must wait: a join of a thread
    /// whose end is not replayed yet, or the taking of a lock another thread
    /// holds. Then `t` is held until that end, or that release.
    #[inline(always)]
    pub(super) fn blocks(&mut self, t: usize, ev: Ev) -> bool {
        match ev {
            Ev::Join { thread } if !self.threads[thread as usize].ended() => {
                self.hold(t);
                self.joins.push((t, thread as usize));
                true
            }
            Ev::Acquire { lock } if self.c.locks && self.locks[lock as usize].holder != NO_SLOT => {
                self.hold(t);
                self.lock_waits.push((t, lock));
                true
            }
            _ => false,
        }
    }

    #[cold]
    fn hold(&mut self, t: usize) {
        let th = &mut self.threads[t];
        th.held = true;
        th.live = false;
        self.live.retain(|&o| o as usize != t);
    }

    /// A lock-taking marker pushed for lock `id`: the next taking of it.
    pub(super) fn acquired(&mut self, id: u64) -> Ev {
        Ev::Acquire { lock: self.lock_index(id) }
    }

    /// A lock-release marker pushed for lock `id`.
    pub(super) fn released(&mut self, id: u64) -> Ev {
        Ev::Release { lock: self.lock_index(id) }
    }

    fn lock_index(&mut self, id: u64) -> u32 {
        let next = self.locks.len() as u32;
        let (&mut i, new) = self.lock_ids.get_or_insert_mut(id, next);
        if new {
            self.locks.push(LockTime { holder: NO_SLOT, free_at: 0 });
        }
        i
    }

    /// Lock `lock` was let go: of the threads held at it, the one with the
    /// lowest clock goes on (its taking then waits for the release's time;
    /// should another thread take the lock first, it is held again).
    #[cold]
    pub(super) fn wake_taker(&mut self, lock: u32) {
        let next = (0..self.lock_waits.len())
            .filter(|&i| self.lock_waits[i].1 == lock)
            .min_by_key(|&i| self.threads[self.lock_waits[i].0].clock);
        if let Some(i) = next {
            let (j, _) = self.lock_waits.swap_remove(i);
            self.go_on(j, 0);
        }
    }

    /// Thread `x` ended: the threads held at a join of it go on.
    #[cold]
    pub(super) fn wake_joiners(&mut self, x: usize) {
        let end = self.threads[x].clock;
        let mut i = 0;
        while i < self.joins.len() {
            if self.joins[i].1 != x {
                i += 1;
                continue;
            }
            let (j, _) = self.joins.swap_remove(i);
            self.go_on(j, end);
        }
    }

    /// Held thread `t` goes on, live, from `clock` or its own if later.
    pub(super) fn go_on(&mut self, t: usize, clock: u64) {
        let th = &mut self.threads[t];
        if th.clock < clock {
            th.parts[WAIT] += clock - th.clock;
            th.clock = clock;
        }
        th.held = false;
        th.live = true;
        self.live.push(t as u32);
    }

    /// Starts thread `t` at the clock of `creator` if it is another live
    /// thread (see [`Contention::push`]), else of the latest event replayed.
    #[cold]
    pub(super) fn start(&mut self, t: usize, creator: Option<usize>) {
        let clock = match creator.filter(|&c| c != t && self.threads[c].live) {
            Some(c) => {
                self.settle(c);
                self.threads[c].clock
            }
            None => self.now,
        };
        self.begin(t, clock);
    }

    /// Thread `t` begins, live, at `clock`.
    pub(super) fn begin(&mut self, t: usize, clock: u64) {
        let th = &mut self.threads[t];
        th.started = true;
        th.live = true;
        th.held = false;
        th.clock = clock;
        th.started_at = clock;
        th.persisted_at = clock;
        th.nt_line = NO_LINE;
        self.live.push(t as u32);
    }

    /// Every held thread with events goes on (at its own clock, or if it
    /// never started, at the latest event's): when only held threads have
    /// events, what they wait for is not in the trace (a join of a thread
    /// whose end was cut off). False when there are none.
    #[cold]
    pub(super) fn release_all(&mut self) -> bool {
        let held: Vec<usize> =
            (0..self.threads.len()).filter(|&t| self.threads[t].held && !self.threads[t].queue.is_empty()).collect();
        for &t in &held {
            let joiner = self.joins.iter().any(|&(j, _)| j == t) || self.lock_waits.iter().any(|&(j, _)| j == t);
            self.joins.retain(|&(j, _)| j != t);
            self.lock_waits.retain(|&(j, _)| j != t);
            if joiner {
                // The join (or the lock) it waits at is given up.
                self.threads[t].queue[0] = Ev::Other;
                self.go_on(t, 0);
            } else {
                self.begin(t, self.now);
            }
        }
        !held.is_empty()
    }
}
