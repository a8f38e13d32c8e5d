//! One module per tool: `mooncdc-x`'s logic is `cmd::x::run`, its binary
//! `src/bin/mooncdc-x.rs` only parses the arguments and maps errors to exit
//! statuses, and its tests are `tests/x.rs`.

pub mod apply;
pub mod audit;
pub mod capture;
pub mod compact;
pub mod merge;
pub mod snapshot;
pub mod split;
