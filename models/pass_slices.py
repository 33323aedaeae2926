"""How a batch of texts is cut into forward passes: by token count, within both budgets."""

import math

from models.packing import ROW_TOKENS


def token_budget_slices(
    token_counts: list[int],
    max_tokens: int,
    max_batch_size: int,
    max_batch_tokens: int,
    pass_cost: int,
    *,
    packed: bool = False,
) -> list[list[int]]:
    """Text indices sorted by token count, cut into the cheapest forward passes within both
    budgets.

    A pass costs `pass_cost` (PASS_COST_TOKENS) plus its tokens: its size times its longest
    (truncated) text when padded, the sum of its texts' when `packed` (models/packing.py) and
    two of them fit in one row; packed texts too long to share a row each get a row as long
    as the longest, which is the padded cost again.
    Sorting first keeps short texts from being padded to a long neighbour; the cuts then come
    from a shortest path over the sorted texts, so a long tail gets its own pass only where the
    padding it saves outweighs a pass. One text over the token budget still runs alone.
    """
    order = sorted(range(len(token_counts)), key=token_counts.__getitem__)
    lengths = [min(token_counts[i], max_tokens) for i in order]
    cost = [0.0] + [math.inf] * len(order)  # cost[j]: the cheapest passes over the j shortest
    first = [0] * (len(order) + 1)  # first[j]: where the last of those passes starts
    for end in range(1, len(order) + 1):
        longest, summed = lengths[end - 1], 0
        for begin in range(end - 1, max(end - max_batch_size, 0) - 1, -1):
            size, summed = end - begin, summed + lengths[begin]
            # Sorted: the pass's two shortest texts are the likeliest to share a row.
            shares = packed and size > 1 and lengths[begin] + lengths[begin + 1] <= ROW_TOKENS
            tokens = summed if shares else size * longest
            if size > 1 and tokens > max_batch_tokens:
                break
            total = cost[begin] + pass_cost + tokens
            if total < cost[end]:
                cost[end], first[end] = total, begin
    slices: list[list[int]] = []
    end = len(order)
    while end:
        slices.append(order[first[end] : end])
        end = first[end]
    return slices[::-1]
