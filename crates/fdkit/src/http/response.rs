//! [`Status`] and the pieces of response heads, written into a caller's reused buffer.

/// The statuses the static server sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Status {
    /// 200.
    Ok,
    /// 206.
    PartialContent,
    /// 301.
    MovedPermanently,
    /// 304.
    NotModified,
    /// 400.
    BadRequest,
    /// 403.
    Forbidden,
    /// 404.
    NotFound,
    /// 405.
    MethodNotAllowed,
    /// 412.
    PreconditionFailed,
    /// 413.
    ContentTooLarge,
    /// 416.
    RangeNotSatisfiable,
    /// 431.
    HeaderFieldsTooLarge,
    /// 500.
    InternalServerError,
    /// 503.
    ServiceUnavailable,
    /// 505.
    VersionNotSupported,
}

impl Status {
    /// The status code.
    pub fn code(self) -> u16 {
        match self {
            Status::Ok => 200,
            Status::PartialContent => 206,
            Status::MovedPermanently => 301,
            Status::NotModified => 304,
            Status::BadRequest => 400,
            Status::Forbidden => 403,
            Status::NotFound => 404,
            Status::MethodNotAllowed => 405,
            Status::PreconditionFailed => 412,
            Status::ContentTooLarge => 413,
            Status::RangeNotSatisfiable => 416,
            Status::HeaderFieldsTooLarge => 431,
            Status::InternalServerError => 500,
            Status::ServiceUnavailable => 503,
            Status::VersionNotSupported => 505,
        }
    }

    /// The status line, CRLF included (`HTTP/1.1 404 Not Found\r\n`).
    pub fn line(self) -> &'static [u8] {
        match self {
            Status::Ok => b"HTTP/1.1 200 OK\r\n",
            Status::PartialContent => b"HTTP/1.1 206 Partial Content\r\n",
            Status::MovedPermanently => b"HTTP/1.1 301 Moved Permanently\r\n",
            Status::NotModified => b"HTTP/1.1 304 Not Modified\r\n",
            Status::BadRequest => b"HTTP/1.1 400 Bad Request\r\n",
            Status::Forbidden => b"HTTP/1.1 403 Forbidden\r\n",
            Status::NotFound => b"HTTP/1.1 404 Not Found\r\n",
            Status::MethodNotAllowed => b"HTTP/1.1 405 Method Not Allowed\r\n",
            Status::PreconditionFailed => b"HTTP/1.1 412 Precondition Failed\r\n",
            Status::ContentTooLarge => b"HTTP/1.1 413 Content Too Large\r\n",
            Status::RangeNotSatisfiable => b"HTTP/1.1 416 Range Not Satisfiable\r\n",
            Status::HeaderFieldsTooLarge => b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
            Status::InternalServerError => b"HTTP/1.1 500 Internal Server Error\r\n",
            Status::ServiceUnavailable => b"HTTP/1.1 503 Service Unavailable\r\n",
            Status::VersionNotSupported => b"HTTP/1.1 505 HTTP Version Not Supported\r\n",
        }
    }

    /// The small plain-text body an error response carries (`404 Not Found\n`).
    pub fn body(self) -> &'static [u8] {
        match self {
            Status::Ok | Status::PartialContent | Status::NotModified => b"",
            _ => BODIES[self.index()],
        }
    }

    /// Whether the connection must close after this status (the request could not be read to
    /// its end, so the next one cannot be found).
    pub fn closes(self) -> bool {
        matches!(
            self,
            Status::BadRequest
                | Status::ContentTooLarge
                | Status::HeaderFieldsTooLarge
                | Status::VersionNotSupported
                | Status::InternalServerError
                | Status::ServiceUnavailable
        )
    }

    fn index(self) -> usize {
        match self {
            Status::Ok => 0,
            Status::PartialContent => 1,
            Status::MovedPermanently => 2,
            Status::NotModified => 3,
            Status::BadRequest => 4,
            Status::Forbidden => 5,
            Status::NotFound => 6,
            Status::MethodNotAllowed => 7,
            Status::ContentTooLarge => 8,
            Status::RangeNotSatisfiable => 9,
            Status::HeaderFieldsTooLarge => 10,
            Status::InternalServerError => 11,
            Status::ServiceUnavailable => 12,
            Status::VersionNotSupported => 13,
            Status::PreconditionFailed => 14,
        }
    }
}

/// The error bodies: the status line's code and reason, then LF.
const BODIES: [&[u8]; 15] = [
    b"200 OK\n",
    b"206 Partial Content\n",
    b"301 Moved Permanently\n",
    b"304 Not Modified\n",
    b"400 Bad Request\n",
    b"403 Forbidden\n",
    b"404 Not Found\n",
    b"405 Method Not Allowed\n",
    b"413 Content Too Large\n",
    b"416 Range Not Satisfiable\n",
    b"431 Request Header Fields Too Large\n",
    b"500 Internal Server Error\n",
    b"503 Service Unavailable\n",
    b"505 HTTP Version Not Supported\n",
    b"412 Precondition Failed\n",
];

/// Appends `n` in decimal, without allocating.
pub fn write_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_match_lines() {
        for s in [
            Status::MovedPermanently,
            Status::BadRequest,
            Status::Forbidden,
            Status::NotFound,
            Status::MethodNotAllowed,
            Status::PreconditionFailed,
            Status::ContentTooLarge,
            Status::RangeNotSatisfiable,
            Status::HeaderFieldsTooLarge,
            Status::InternalServerError,
            Status::ServiceUnavailable,
            Status::VersionNotSupported,
        ] {
            let line = s.line();
            let mut expect = line[9..line.len() - 2].to_vec();
            expect.push(b'\n');
            assert_eq!(s.body(), &expect[..]);
            assert!(line.starts_with(format!("HTTP/1.1 {} ", s.code()).as_bytes()));
        }
        assert_eq!(Status::Ok.body(), b"");
    }

    #[test]
    fn decimals() {
        for n in [0u64, 7, 10, 12345, u64::MAX] {
            let mut v = Vec::new();
            write_decimal(&mut v, n);
            assert_eq!(v, n.to_string().as_bytes());
        }
    }
}
