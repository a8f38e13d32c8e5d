//! What the binaries share, one concern a file: argument definitions
//! (`args`), opening inputs with format detection (`input`), output files
//! written atomically (`output`), error printing with exit statuses
//! (`exit`), progress (`progress`), completion scripts and man pages
//! (`generated`).

pub mod args;

pub use crate::wire::DynRead;

mod exit;
mod generated;
mod input;
mod output;
mod progress;

pub use exit::*;
pub use generated::*;
pub use input::*;
pub use output::*;
pub use progress::*;
