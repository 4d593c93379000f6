//! The read-write lock in the simulation.

use super::*;
