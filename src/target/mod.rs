//! Targets: where batches and snapshots land.
//!
//! The contract every target keeps (DESIGN §9): it stores its cursor next to the
//! data; with no cursor for the source it accepts a batch from any start; a batch
//! whose interval it already holds is a no-op; one that overlaps applies only the
//! events after the stored cursor; one that starts after it is a gap and fails; a
//! batch of another source fails. By default it checks images: inserting an
//! existing key, or an update/delete whose `before` differs from the stored row,
//! fails. A failed batch changes nothing.

pub mod clickhouse;
pub mod memory;
pub mod sqlite;
