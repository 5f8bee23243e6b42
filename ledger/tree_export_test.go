package ledger

// TreeCacheLen is the number of Merkle nodes l keeps computed from its
// events.
func TreeCacheLen(l *Ledger) int { return l.treeCache.len() }

// TreeCacheNodes is treeCacheNodes.
const TreeCacheNodes = treeCacheNodes
