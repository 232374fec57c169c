//! Turning errors into the short messages conditions, events and logs carry.

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

/// `text` cut to at most `limit` bytes on a character boundary, with `…` when cut.
pub fn shorten(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
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

    #[test]
    fn long_text_is_cut_on_a_character_boundary() {
        assert_eq!(shorten("short", 10), "short");
        let cut = shorten(&"é".repeat(10), 5);
        assert_eq!(cut, "éé…");
    }
}
