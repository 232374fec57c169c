//! How often drift correction has restored each object lately, so that a fight with another
//! writer ends: an object corrected [`CONFLICT_LIMIT`] times within [`CONFLICT_WINDOW`] is a
//! `DriftConflict`.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Corrections of one object within [`CONFLICT_WINDOW`] after which it is left as it is.
const CONFLICT_LIMIT: usize = 3;
/// See [`CONFLICT_LIMIT`].
const CONFLICT_WINDOW: Duration = Duration::from_secs(600);

/// Corrections per object (composition UID and object), within [`CONFLICT_WINDOW`].
#[derive(Default)]
pub(in crate::composition) struct Corrections(Mutex<HashMap<(String, String), VecDeque<Instant>>>);

impl Corrections {
    /// Counts one more correction; whether that is one too many.
    pub(in crate::composition) fn too_many(&self, uid: &str, object: &str) -> bool {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        // Corrections older than the window are forgotten, and so are objects with none left.
        map.retain(|_, times| {
            times.retain(|t| now.duration_since(*t) < CONFLICT_WINDOW);
            !times.is_empty()
        });
        let times = map
            .entry((uid.to_string(), object.to_string()))
            .or_default();
        if times.len() >= CONFLICT_LIMIT {
            return true;
        }
        times.push_back(now);
        false
    }
}
