//go:build !unix

package producer

// offHeap returns size zeroed bytes: from the Go heap on systems where
// aerie does not map memory itself (see offheap_unix.go).
func offHeap(size int) ([]byte, func()) {
	return make([]byte, size), func() {}
}
