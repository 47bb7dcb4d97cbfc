"""Plain words in what the commands print."""


def counted(n: int, one: str, many: str = "") -> str:
    """``1 plant``, ``2 plants``, ``0 webhook deliveries``."""
    return f"{n} {one if n == 1 else many or one + 's'}"
