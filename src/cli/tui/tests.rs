//! The review screen's pure parts: collapse, order, keys.
