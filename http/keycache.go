package http

import (
	"context"
	"sync"
	"time"

	"github.com/keybrake/keybrake"
)

// keyCacheSize bounds the cache; past it, the cache is emptied and refilled.
const keyCacheSize = 10_000

// KeyCacheMaxAge bounds how long a cached key is used without reading it
// again, whatever the store's watcher reports. The watcher evicts a key on
// every change it hears of, but a notification can be lost without the
// watcher knowing (a pooler in transaction mode swallows LISTEN's
// notifications; a half-open connection hears nothing until TCP keepalive
// gives up, minutes later): a revoked key, or one whose allowlist or
// allow_unpriced was narrowed, would then keep its reads, free writes and
// unpriced writes on that replica for as long as it lived. Money-moving
// requests never depend on the cache alone: an unpriced request, or a
// priced one on a held object, reads the key again before it is decided;
// a priced one's reservation checks the cached key's version under the
// key's lock, and is decided again on a fresh read when it moved
// (proxy.serve, admitChecked); Reserve reads the caps again under that
// lock.
const KeyCacheMaxAge = 5 * time.Second

// keyCache keeps vault keys by secret hash so that authenticating a request
// costs no store read. It is only used with a store that implements
// keybrake.KeyWatcher, and every change reported evicts the key, so a
// revocation or cap change applies on the next request; a change whose
// report was lost applies at most KeyCacheMaxAge later. Money-moving
// requests never rely on it alone: Reserve reads the key's policy again
// inside its transaction.
type keyCache struct {
	mu     sync.Mutex
	gen    uint64 // bumped by every change, so a lookup racing a change is not cached
	byHash map[string]cachedKey
	// hashOf maps a key ID to every hash it is cached under: during a
	// rotation's grace period a key is cached under its old secret and its
	// new one, and a change must evict both.
	hashOf map[string][]string
}

// cachedKey is a key and when it was read from the store.
type cachedKey struct {
	key  *keybrake.Key
	read time.Time
}

func newKeyCache() *keyCache {
	return &keyCache{byHash: map[string]cachedKey{}, hashOf: map[string][]string{}}
}

// get returns the key cached under hash, or nil when none is, or when it
// was read more than KeyCacheMaxAge before now (or after now: a clock set
// back).
func (c *keyCache) get(hash string, now time.Time) (*keybrake.Key, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byHash[hash]
	if !ok || now.Sub(e.read) > KeyCacheMaxAge || now.Before(e.read) {
		return nil, c.gen
	}
	return e.key, c.gen
}

// put caches k, read at read, unless a change was reported since gen was
// read.
func (c *keyCache) put(hash string, k *keybrake.Key, gen uint64, read time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return
	}
	if len(c.byHash) >= keyCacheSize {
		c.byHash, c.hashOf = map[string]cachedKey{}, map[string][]string{}
	}
	if _, ok := c.byHash[hash]; !ok {
		c.hashOf[k.ID] = append(c.hashOf[k.ID], hash)
	}
	c.byHash[hash] = cachedKey{key: k, read: read}
}

// evict drops a key, or every key for id "".
func (c *keyCache) evict(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if id == "" {
		c.byHash, c.hashOf = map[string]cachedKey{}, map[string][]string{}
		return
	}
	for _, h := range c.hashOf[id] {
		delete(c.byHash, h)
	}
	delete(c.hashOf, id)
}

// findKey returns the key whose vault key hashes to hash, from the cache
// when the store reports changes, else from the store.
func (s *Server) findKey(ctx context.Context, hash string) (*keybrake.Key, error) {
	k, _, err := s.findKeyCached(ctx, hash, false)
	return k, err
}

// findKeyCached is findKey; with fresh it reads the store whatever the
// cache holds (and caches what it read). cached reports whether the key
// came from the cache.
func (s *Server) findKeyCached(ctx context.Context, hash string, fresh bool) (k *keybrake.Key, cached bool, err error) {
	if s.keys == nil {
		k, err = s.Store.FindKeyBySecretHash(ctx, hash)
		return k, false, err
	}
	read := s.Now()
	k, gen := s.keys.get(hash, read)
	if k != nil && !fresh {
		return k, true, nil
	}
	k, err = s.Store.FindKeyBySecretHash(ctx, hash)
	if err != nil {
		return nil, false, err
	}
	s.keys.put(hash, k, gen, read)
	return k, false, nil
}

// watchKeys starts the cache if the store can report changes.
func (s *Server) watchKeys() error {
	w, ok := s.Store.(keybrake.KeyWatcher)
	if !ok {
		return nil
	}
	cache := newKeyCache()
	ctx, cancel := context.WithCancel(context.Background())
	if err := w.WatchKeys(ctx, cache.evict); err != nil {
		cancel()
		return err
	}
	s.keys, s.stopWatch = cache, cancel
	if sw, ok := w.(keybrake.SyncKeyWatcher); ok {
		s.keysSync = sw
	}
	return nil
}

// evictKey drops a key this server changed, without waiting for the
// store's report.
func (s *Server) evictKey(id string) {
	if s.keys != nil {
		s.keys.evict(id)
	}
}

// keysSynchronous reports whether the key cache holds nothing older than
// the store now (keybrake.SyncKeyWatcher), so a money-moving request on a
// cached key need not read it again. Asked every time: on SQLite it turns
// false while another process has the file open.
func (s *Server) keysSynchronous() bool {
	return s.keysSync != nil && s.keysSync.KeyReportsSynchronous()
}
