"""Small mechanisms with no knowledge of plants: a file replaced durably, a file opened
without following links, one computation shared by concurrent callers."""
