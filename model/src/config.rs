//! The one configuration mechanism of pmsim's allocators: a serde struct of
//! every parameter, changed by name (`--set stripes=4`, `llfree:eadr=true`,
//! a sweep's axis) and validated on every change, so an impossible value is
//! refused where it is written — when a sweep is planned, not when its point
//! runs.

use crate::error::AllocError;
use crate::params::{set_field, split_overrides};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// An allocator's parameters. Implement [`AllocConfig::validate`]; `set`
/// and `with_overrides` come with it and always validate.
pub trait AllocConfig:
    Clone + std::fmt::Debug + Default + Serialize + DeserializeOwned + Send + Sync + 'static
{
    /// The allocator's name in messages (`NVAlloc`, `LLFree`).
    const ALLOC: &'static str;

    /// Refuses impossible or not-yet-implemented settings with one line that
    /// names the parameter, its value and the allowed range (`stripes = 100
    /// (must be 1..=64)`).
    fn validate(&self) -> Result<(), AllocError>;

    /// Sets parameter `key` from its text (JSON, or a bare string: `4`,
    /// `0.2`, `true`, `gc`) and validates the result; on error `self` is unchanged.
    fn set(&mut self, key: &str, value: &str) -> Result<(), AllocError> {
        let mut next = self.clone();
        set_field(&mut next, &format!("{} parameter", Self::ALLOC), key, value)
            .map_err(|m| AllocError::config(Self::ALLOC, m))?;
        next.validate()?;
        *self = next;
        Ok(())
    }

    /// Applies `key=value` overrides in order and validates the result once
    /// (so two parameters bounded by each other can be changed together).
    fn with_overrides<'a>(mut self, kvs: impl IntoIterator<Item = &'a str>) -> Result<Self, AllocError> {
        for (k, v) in split_overrides(kvs).map_err(|m| AllocError::config(Self::ALLOC, m))? {
            set_field(&mut self, &format!("{} parameter", Self::ALLOC), k, v)
                .map_err(|m| AllocError::config(Self::ALLOC, m))?;
        }
        self.validate()?;
        Ok(self)
    }
}
