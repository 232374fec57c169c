//! Turning errors into the one-line messages conditions, events and logs carry.

/// The error with its sources on one line; an apiserver error contributes only its own message
/// (not the whole `Status` it came in).
pub fn error_message(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = Vec::new();
    let mut next = Some(error);
    while let Some(current) = next {
        if let Some(kube::Error::Api(status)) = current.downcast_ref::<kube::Error>() {
            parts.push(status.message.clone());
            break;
        }
        parts.push(current.to_string());
        next = current.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("reading the chart")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn messages_carry_their_sources() {
        let error = Outer(std::io::Error::other("disk on fire"));
        assert_eq!(error_message(&error), "reading the chart: disk on fire");
    }
}
