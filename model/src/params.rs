//! `key=value` overrides of a serde parameter struct: the one mechanism behind
//! `--set` (allocator configs) and `--param` (workloads), so every parameter a
//! struct serializes can be changed from the command line by its own name.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// A parameter struct as a JSON object (for trace headers and result rows).
pub fn as_map<T: Serialize>(params: &T) -> serde_json::Map<String, serde_json::Value> {
    match serde_json::to_value(params).expect("parameters serialize") {
        serde_json::Value::Object(m) => m,
        _ => unreachable!("parameters are a struct"),
    }
}

/// Splits `key=value` (both trimmed).
pub fn split_override(kv: &str) -> Result<(&str, &str), String> {
    let (k, v) = kv.split_once('=').ok_or_else(|| format!("override '{kv}' is not of the form key=value"))?;
    let (k, v) = (k.trim(), v.trim());
    if k.is_empty() {
        return Err(format!("override '{kv}' names no parameter"));
    }
    Ok((k, v))
}

/// Splits every `key=value` of `kvs`, refusing a key given twice (one of
/// the two would silently win): the error names both.
pub fn split_overrides<'a>(kvs: impl IntoIterator<Item = &'a str>) -> Result<Vec<(&'a str, &'a str)>, String> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    let mut written: Vec<&str> = Vec::new();
    for kv in kvs {
        let (k, v) = split_override(kv)?;
        if let Some(i) = out.iter().position(|(o, _)| *o == k) {
            return Err(format!("'{k}' is given twice ({} and {}): give it once", written[i].trim(), kv.trim()));
        }
        out.push((k, v));
        written.push(kv);
    }
    Ok(out)
}

/// Sets field `key` of `params` to `value`, read as JSON or else as a bare
/// string (`4`, `0.2`, `true`, `gc`). `what` names the struct in errors: "unknown
/// {what} 'key' (known: …)" and "bad value 'value' for key: …".
pub fn set_field<T: Serialize + DeserializeOwned>(
    params: &mut T,
    what: &str,
    key: &str,
    value: &str,
) -> Result<(), String> {
    let mut v = serde_json::to_value(&*params).map_err(|e| format!("{what}s do not serialize: {e}"))?;
    let map = v.as_object_mut().ok_or_else(|| format!("{what}s are not a struct"))?;
    if !map.contains_key(key) {
        let keys: Vec<&str> = map.keys().map(String::as_str).collect();
        if keys.is_empty() {
            return Err(format!("unknown {what} '{key}' (there are none)"));
        }
        return Err(format!("unknown {what} '{key}' (known: {})", keys.join(", ")));
    }
    let parsed = serde_json::from_str(value).unwrap_or_else(|_| serde_json::Value::String(value.to_string()));
    map.insert(key.to_string(), parsed);
    *params = serde_json::from_value(v).map_err(|e| format!("bad value '{value}' for {key}: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, serde::Deserialize, Debug, PartialEq)]
    struct P {
        n: u32,
        name: String,
    }

    #[test]
    fn sets_known_fields_and_names_unknown_ones() {
        let mut p = P { n: 1, name: "a".into() };
        set_field(&mut p, "parameter", "n", "7").unwrap();
        set_field(&mut p, "parameter", "name", "gc").unwrap();
        assert_eq!(p, P { n: 7, name: "gc".into() });
        let e = set_field(&mut p, "parameter", "m", "1").unwrap_err();
        assert_eq!(e, "unknown parameter 'm' (known: n, name)");
        assert!(set_field(&mut p, "parameter", "n", "-1").unwrap_err().starts_with("bad value '-1' for n"));
        assert_eq!(p.n, 7);
        assert_eq!(split_override(" a = b "), Ok(("a", "b")));
        assert!(split_override("ab").is_err());
    }
}
