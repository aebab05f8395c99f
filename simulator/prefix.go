package simulator

import "container/list"

// prefixCache is the engine's prefix cache (Config.PrefixCache): the
// prompts read recently, by prompt hash, least recently used first out.
// A prompt is in it from the moment a sequence reading it is admitted,
// as vLLM's V1 scheduler registers a prompt's blocks when it allocates
// them, so that the same prompt later in the same batch hits it. The
// zero value is not usable; see newPrefixCache. Guarded by engine.mu.
type prefixCache struct {
	limit int // prompts kept; 0 keeps none
	order list.List
	at    map[uint64]*list.Element
	// queries and hits count prompt tokens looked up and found.
	queries, hits int64
}

func newPrefixCache(limit int) *prefixCache {
	return &prefixCache{limit: max(limit, 0), at: map[uint64]*list.Element{}}
}

// cachedTokens is how many of a prompt's tokens a hit spares reading:
// its whole blocks, but never its last token, which vLLM computes again
// to sample the first answer token from.
func cachedTokens(prompt int) int {
	return max(prompt-1, 0) / kvBlockSize * kvBlockSize
}

// lookup reports how many tokens of s's prompt the cache holds, without
// counting the look-up: the scheduler may yet not admit s. Only a
// sequence read for the first time is looked up; a preempted one reads
// its prompt and what it generated again.
func (c *prefixCache) lookup(s *sequence) int {
	if c.limit == 0 || s.prefix == 0 || s.kept > 0 {
		return 0
	}
	if _, ok := c.at[s.prefix]; !ok {
		return 0
	}
	return cachedTokens(s.prompt)
}

// admit counts s's look-up, with hit the tokens lookup found, and keeps
// its prompt as the most recently used.
func (c *prefixCache) admit(s *sequence, hit int) {
	if c.limit == 0 || s.prefix == 0 || s.kept > 0 {
		return
	}
	c.queries += int64(s.prompt)
	c.hits += int64(hit)
	if el, ok := c.at[s.prefix]; ok {
		c.order.MoveToBack(el)
		return
	}
	c.at[s.prefix] = c.order.PushBack(s.prefix)
	for c.order.Len() > c.limit {
		old := c.order.Front()
		c.order.Remove(old)
		delete(c.at, old.Value.(uint64))
	}
}
