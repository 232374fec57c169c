//! A fair share of the workers: reconciles wait for one of a fixed number of permits, and a
//! freed permit goes to the namespaces with waiters in turn, not to whoever asked first. A team
//! creating a thousand compositions at once then delays another team's one composition by one
//! reconcile per worker, not by a thousand.
//!
//! kube's controller runs reconciles in the order they become due; with its own concurrency
//! limit lifted, every due reconcile starts and waits here instead, which costs a small future
//! each, not a worker.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// Permits to run, shared out fairly among keys (namespaces).
#[derive(Clone)]
pub struct FairGate {
    state: Arc<Mutex<State>>,
}

struct State {
    /// Permits no one holds.
    free: usize,
    /// Waiters per key, oldest first.
    waiting: BTreeMap<String, VecDeque<oneshot::Sender<Permit>>>,
    /// Keys with waiters, in the order they get the next permits.
    turns: VecDeque<String>,
}

/// The right to run; the next waiter gets it when it is dropped.
pub struct Permit {
    gate: Option<FairGate>,
}

impl FairGate {
    /// A gate letting `permits` (at least one) run at once.
    pub fn new(permits: usize) -> Self {
        FairGate {
            state: Arc::new(Mutex::new(State {
                free: permits.max(1),
                waiting: BTreeMap::new(),
                turns: VecDeque::new(),
            })),
        }
    }

    /// Waits for a permit as one of `key`'s waiters.
    pub async fn enter(&self, key: &str) -> Permit {
        let receiver = {
            let mut state = self.lock();
            if state.free > 0 && state.turns.is_empty() {
                state.free -= 1;
                return self.permit();
            }
            let (sender, receiver) = oneshot::channel();
            let State { waiting, turns, .. } = &mut *state;
            let queue = waiting.entry(key.to_string()).or_default();
            if queue.is_empty() {
                turns.push_back(key.to_string());
            }
            queue.push_back(sender);
            receiver
        };
        // Every sender is consumed by a send, so the channel is never closed without a permit.
        receiver.await.unwrap_or_else(|_| self.permit())
    }

    fn permit(&self) -> Permit {
        Permit {
            gate: Some(self.clone()),
        }
    }

    /// Gives a freed permit to the next key in turn, else keeps it.
    fn release(&self) {
        let mut state = self.lock();
        while let Some(key) = state.turns.pop_front() {
            let Some(queue) = state.waiting.get_mut(&key) else {
                continue;
            };
            let next = queue.pop_front();
            let more = !queue.is_empty();
            if more {
                state.turns.push_back(key);
            } else {
                state.waiting.remove(&key);
            }
            if let Some(sender) = next {
                match sender.send(self.permit()) {
                    Ok(()) => return,
                    // The waiter gave up (shutdown): the permit comes back here; defuse it
                    // so it does not release again while the lock is held.
                    Err(mut permit) => permit.gate = None,
                }
            }
        }
        state.free += 1;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every change under the lock leaves the state consistent.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Who got permits, in order, as each holder lets go at once.
    async fn order(gate: &FairGate, waiters: &[&str]) -> Vec<String> {
        let granted = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for key in waiters {
            let (gate, granted, key) = (gate.clone(), granted.clone(), key.to_string());
            tasks.push(tokio::spawn(async move {
                let _permit = gate.enter(&key).await;
                granted.lock().unwrap().push(key);
            }));
            // Each waiter queues before the next one is spawned.
            tokio::task::yield_now().await;
        }
        for task in tasks {
            task.await.unwrap();
        }
        Arc::try_unwrap(granted).unwrap().into_inner().unwrap()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn namespaces_take_turns_whoever_asked_first() {
        let gate = FairGate::new(1);
        let held = gate.enter("busy").await;
        let waiters = ["busy", "busy", "busy", "busy", "quiet", "other"];
        let granted = tokio::spawn({
            let gate = gate.clone();
            async move { order(&gate, &waiters).await }
        });
        tokio::task::yield_now().await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        drop(held);
        let granted = granted.await.unwrap();
        assert_eq!(
            granted,
            ["busy", "quiet", "other", "busy", "busy", "busy"],
            "the quiet namespaces wait one turn, not four"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn permits_limit_how_many_run_at_once() {
        let gate = FairGate::new(2);
        let a = gate.enter("a").await;
        let _b = gate.enter("b").await;
        let third = tokio::spawn({
            let gate = gate.clone();
            async move { gate.enter("c").await }
        });
        tokio::task::yield_now().await;
        assert!(!third.is_finished(), "two permits, both held");
        drop(a);
        let _c = tokio::time::timeout(std::time::Duration::from_secs(5), third)
            .await
            .expect("a freed permit is passed on")
            .unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_waiter_that_gives_up_loses_no_permit() {
        let gate = FairGate::new(1);
        let held = gate.enter("a").await;
        let gave_up = tokio::spawn({
            let gate = gate.clone();
            async move { gate.enter("b").await }
        });
        tokio::task::yield_now().await;
        gave_up.abort();
        let _ = gave_up.await;
        drop(held);
        let again = tokio::time::timeout(std::time::Duration::from_secs(5), gate.enter("c"))
            .await
            .expect("the permit came back");
        drop(again);
        assert_eq!(gate.lock().free, 1);
    }
}
