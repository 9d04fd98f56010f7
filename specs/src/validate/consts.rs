//! `--const NAME=VALUE`: constants of a trace specification replaced from
//! the command line, checked before TLC starts (TLC reports a value it
//! cannot parse as an exception, after the trace was mapped).

/// Parses `NAME=VALUE` overrides: a TLA+ identifier, given once, and a
/// value in the syntax of TLC's configuration files (an integer, a string,
/// `TRUE`/`FALSE`, a model value, or a set `{…}` of these).
pub fn parse_consts(kvs: &[String]) -> Result<Vec<(String, String)>, String> {
    let mut out: Vec<(String, String)> = Vec::new();
    for kv in kvs {
        let bad = |why: String| format!("--const {kv:?}: {why}");
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| bad("expected NAME=VALUE (a TLA+ value, e.g. FlushEach=\"op\")".into()))?;
        let (k, v) = (k.trim(), v.trim());
        if !is_ident(k) {
            return Err(bad(format!("{k:?} is not a constant's name (letters, digits, '_')")));
        }
        if v.is_empty() {
            return Err(bad("no value (e.g. FlushEach=\"op\")".into()));
        }
        value(v).map_err(|e| bad(format!("not a value TLC's configuration accepts: {e}")))?;
        if let Some((_, first)) = out.iter().find(|(n, _)| n == k) {
            return Err(format!("--const {k} is given twice ({k}={first} and {k}={v}): give it once"));
        }
        out.push((k.to_string(), v.to_string()));
    }
    Ok(out)
}

/// What kind of value a configuration value is: a number, a string, a
/// boolean, a set or a model value.
fn kind(v: &str) -> &'static str {
    match v.trim().as_bytes().first() {
        Some(b'"') => "a string",
        Some(b'{') => "a set",
        Some(c) if *c == b'-' || c.is_ascii_digit() => "a number",
        _ if matches!(v.trim(), "TRUE" | "FALSE") => "a boolean",
        _ => "a model value",
    }
}

/// Refuses a replacement of a constant whose value `default` the mapping
/// gave by a value of another kind (TLC would fail on it mid-check).
pub fn same_kind(name: &str, default: &str, new: &str) -> Result<(), String> {
    let (want, got) = (kind(default), kind(new));
    if want != got {
        return Err(format!("--const {name}={new}: {got}, where the specification has {want} ({name} = {default})"));
    }
    Ok(())
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && s.chars().any(|c| c.is_ascii_alphabetic())
}

/// Checks that `s` is one configuration value.
fn value(s: &str) -> Result<(), String> {
    let b = s.as_bytes();
    let end = parse(b, skip(b, 0))?;
    let end = skip(b, end);
    if end != b.len() {
        return Err(format!("unexpected {:?} at offset {end}", &s[end..]));
    }
    Ok(())
}

fn skip(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// Parses one value from `i`; returns where it ends.
fn parse(b: &[u8], i: usize) -> Result<usize, String> {
    match b.get(i) {
        None => Err("a value is missing at the end".into()),
        Some(b'"') => {
            let mut j = i + 1;
            while j < b.len() {
                match b[j] {
                    b'\\' => j += 2,
                    b'"' => return Ok(j + 1),
                    b'\n' => break,
                    _ => j += 1,
                }
            }
            Err(format!("the string at offset {i} is not closed"))
        }
        Some(b'{') => {
            let mut j = skip(b, i + 1);
            if b.get(j) == Some(&b'}') {
                return Ok(j + 1);
            }
            loop {
                j = skip(b, parse(b, j)?);
                match b.get(j) {
                    Some(b',') => j = skip(b, j + 1),
                    Some(b'}') => return Ok(j + 1),
                    Some(c) => return Err(format!("expected ',' or '}}' at offset {j}, found {:?}", *c as char)),
                    None => return Err(format!("the set at offset {i} is not closed")),
                }
            }
        }
        Some(c) if *c == b'-' || c.is_ascii_digit() => {
            let mut j = i + 1;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            if j == i + 1 && *c == b'-' {
                return Err(format!("'-' without a number at offset {i}"));
            }
            Ok(j)
        }
        Some(c) if c.is_ascii_alphabetic() || *c == b'_' => {
            let mut j = i + 1;
            while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
                j += 1;
            }
            Ok(j)
        }
        Some(c) => Err(format!("unexpected {:?} at offset {i}", *c as char)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_of_the_config_syntax() {
        for ok in ["\"op\"", "42", "-3", "TRUE", "m1", "{1, 2}", "{}", "{\"a\", {b}}"] {
            assert!(value(ok).is_ok(), "{ok}");
        }
        for bad in ["}}}", "{1,", "\"open", "1 2", "<<1>>", "-", "{1 2}", "@"] {
            assert!(value(bad).is_err(), "{bad}");
        }
        let two = parse_consts(&["Variant=\"a\"".into(), "Variant=\"b\"".into()]).unwrap_err();
        assert!(two.contains("twice"), "{two}");
        assert!(parse_consts(&["Variant=}}}".into()]).unwrap_err().contains("not a value"));
    }
}
