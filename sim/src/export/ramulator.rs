//! Ramulator 2's `LoadStoreTrace` frontend: one request per line,
//! `LD|ST 0x<hex address>`. The format has no time: the frontend issues
//! requests as fast as the memory takes them, so ticks and sizes are dropped.

use super::{Packet, PacketWriter};
use std::io::{self, Write};

pub struct Writer<W: Write> {
    out: W,
}

impl<W: Write> Writer<W> {
    pub fn new(out: W) -> Self {
        Writer { out }
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

impl<W: Write> PacketWriter for Writer<W> {
    #[inline]
    fn packet(&mut self, p: &Packet) -> io::Result<()> {
        let op = if p.write { "ST" } else { "LD" };
        writeln!(self.out, "{op} {:#x}", p.addr)
    }

    fn finish(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}
