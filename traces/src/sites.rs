//! Code sites: where in the traced program a flush or fence was issued.
//!
//! A trace carries a site table (FORMAT.md, "Site tables"): tracers define a
//! site the first time one of its flushes or fences is recorded, in a block of
//! its own written before the data block that first names it, and a flush or
//! fence whose site differs from the one before names it (format version 3;
//! version 2 wrote a SITE record before it), which then holds for the
//! flushes and fences that follow. Site 0 means
//! "unknown": every flush and fence of a trace without sites (format version 1)
//! is at site 0.

use crate::varint::{get, put};
use serde::Serialize;

/// One code site: a source location (the built-in tracer's `#[track_caller]`
/// locations) or a guest instruction with what its debug information says (the
/// DBI tracers). Empty strings and zeros mean "not known".
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Site {
    /// The id flushes and fences name; at least 1.
    pub id: u32,
    /// The instruction address (DBI tracers), 0 if none.
    pub addr: u64,
    /// The function holding the site, if known.
    pub function: String,
    /// The source file, if known.
    pub file: String,
    /// The 1-based source line, 0 if unknown.
    pub line: u32,
    /// The 1-based source column, 0 if unknown.
    pub column: u32,
}

impl Site {
    /// A short human name: `function (file:line)`, `file:line:column`, or the
    /// address; `(unknown)` for site 0.
    pub fn label(&self) -> String {
        let file = self.short_file();
        let place = match (file.is_empty(), self.line, self.column) {
            (true, _, _) => String::new(),
            (false, 0, _) => file.to_string(),
            (false, l, 0) => format!("{file}:{l}"),
            (false, l, c) => format!("{file}:{l}:{c}"),
        };
        // Without a line, the address tells apart two sites of one function.
        let place = match (self.line, self.addr) {
            (0, a) if a != 0 && !place.is_empty() => format!("{place} @{a:#x}"),
            _ => place,
        };
        match (self.function.is_empty(), place.is_empty()) {
            (false, false) => format!("{} ({place})", self.function),
            (false, true) => self.function.clone(),
            (true, false) => place,
            (true, true) if self.addr != 0 => format!("{:#x}", self.addr),
            (true, true) => "(unknown)".to_string(),
        }
    }

    /// The file name without the directories a build machine adds: from the
    /// last of `src/`, `model/`, `sim/`… kept by cargo's relative paths, or
    /// the last two components of an absolute path.
    fn short_file(&self) -> &str {
        let f = self.file.as_str();
        if !f.starts_with('/') {
            return f;
        }
        let mut parts = f.rsplitn(3, '/');
        let (_, _) = (parts.next(), parts.next());
        match parts.next() {
            Some(rest) => &f[rest.len() + 1..],
            None => f,
        }
    }
}

/// The sites a trace defined, by id.
#[derive(Clone, Debug, Default)]
pub struct SiteTable {
    by_id: Vec<Option<Site>>,
}

impl SiteTable {
    /// The site with this id, if the trace defined it.
    pub fn get(&self, id: u32) -> Option<&Site> {
        self.by_id.get(id as usize).and_then(Option::as_ref)
    }

    /// A name for site `id`: its label, `(unknown)` for 0, `site N` for an id
    /// the trace never defined.
    pub fn label(&self, id: u32) -> String {
        match self.get(id) {
            Some(s) => s.label(),
            None if id == 0 => "(unknown)".to_string(),
            None => format!("site {id}"),
        }
    }

    /// Adds or replaces a site.
    pub fn insert(&mut self, site: Site) {
        let i = site.id as usize;
        if self.by_id.len() <= i {
            self.by_id.resize(i + 1, None);
        }
        self.by_id[i] = Some(site);
    }

    /// Number of sites defined.
    pub fn len(&self) -> usize {
        self.by_id.iter().filter(|s| s.is_some()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The defined sites, by id.
    pub fn iter(&self) -> impl Iterator<Item = &Site> {
        self.by_id.iter().flatten()
    }
}

/// Appends the site-table payload of `site` (FORMAT.md, "Site tables").
pub(crate) fn encode_site(out: &mut Vec<u8>, site: &Site) {
    put(out, site.id as u64);
    put(out, site.addr);
    put(out, site.line as u64);
    put(out, site.column as u64);
    put(out, site.file.len() as u64);
    out.extend_from_slice(site.file.as_bytes());
    put(out, site.function.len() as u64);
    out.extend_from_slice(site.function.as_bytes());
}

/// Decodes a site-table payload; an error names the payload byte and the problem.
pub(crate) fn decode_sites(buf: &[u8], table: &mut SiteTable) -> Result<(), (usize, String)> {
    let mut pos = 0;
    while pos < buf.len() {
        let at = pos;
        let mut num = |what: &str, max: u64| -> Result<u64, (usize, String)> {
            let start = pos;
            let v = get(buf, &mut pos).map_err(|_| (start, format!("site {what} is not a valid varint")))?;
            if v > max {
                return Err((start, format!("site {what} {v} exceeds {max}")));
            }
            Ok(v)
        };
        let id = num("id", u32::MAX as u64)? as u32;
        let addr = num("address", u64::MAX)?;
        let line = num("line", u32::MAX as u64)? as u32;
        let column = num("column", u32::MAX as u64)? as u32;
        let mut text = |what: &str| -> Result<String, (usize, String)> {
            let start = pos;
            let n = get(buf, &mut pos).map_err(|_| (start, format!("site {what} length is not a valid varint")))?;
            let end = usize::try_from(n).ok().and_then(|n| pos.checked_add(n)).filter(|&e| e <= buf.len());
            let Some(end) = end else {
                return Err((start, format!("site {what} of {n} bytes runs past the end of the block")));
            };
            let s = std::str::from_utf8(&buf[pos..end]).map_err(|_| (pos, format!("site {what} is not UTF-8")))?;
            pos = end;
            Ok(s.to_string())
        };
        let file = text("file")?;
        let function = text("function")?;
        if id == 0 {
            return Err((at, "site id 0 is reserved for unknown sites".to_string()));
        }
        table.insert(Site { id, addr, function, file, line, column });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        let s = Site { id: 1, file: "model/src/mech/wal.rs".into(), line: 12, column: 9, ..Site::default() };
        assert_eq!(s.label(), "model/src/mech/wal.rs:12:9");
        let s =
            Site { id: 2, function: "pmem_flush".into(), file: "/a/b/src/libpmem.c".into(), line: 7, column: 0, ..s };
        assert_eq!(s.label(), "pmem_flush (src/libpmem.c:7)");
        let s = Site { id: 3, addr: 0x401000, ..Site::default() };
        assert_eq!(s.label(), "0x401000");
        let s = Site { function: "pmemobj_alloc".into(), file: "/usr/lib/libpmemobj.so.1".into(), ..s };
        assert_eq!(s.label(), "pmemobj_alloc (lib/libpmemobj.so.1 @0x401000)");
        assert_eq!(SiteTable::default().label(0), "(unknown)");
        assert_eq!(SiteTable::default().label(9), "site 9");
    }

    #[test]
    fn round_trip_and_errors() {
        let a = Site { id: 5, addr: 1 << 40, function: "f".into(), file: "é.rs".into(), line: 3, column: 4 };
        let mut buf = Vec::new();
        encode_site(&mut buf, &a);
        let mut t = SiteTable::default();
        decode_sites(&buf, &mut t).unwrap();
        assert_eq!(t.get(5), Some(&a));
        assert_eq!(t.len(), 1);
        // Cut anywhere: an error, never a panic.
        for n in 1..buf.len() {
            assert!(decode_sites(&buf[..n], &mut SiteTable::default()).is_err(), "cut at {n}");
        }
        let mut zero = Vec::new();
        encode_site(&mut zero, &Site { id: 0, ..a });
        assert!(decode_sites(&zero, &mut SiteTable::default()).unwrap_err().1.contains("reserved"));
    }
}
