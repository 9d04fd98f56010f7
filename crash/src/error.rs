//! The explorer's error: one line for the user, naming the file and the problem.

/// An error of the explorer: one line for the user.
#[derive(Debug)]
pub struct CrashError(pub String);

impl std::fmt::Display for CrashError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CrashError {}
