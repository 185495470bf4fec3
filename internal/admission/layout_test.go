package admission

import (
	"testing"
	"unsafe"
)

// The padding is the point of these structs; a field added without
// adjusting it would silently put two hot words on one line pair.
func TestPaddedSizes(t *testing.T) {
	if got := unsafe.Sizeof(shard{}); got != 128 {
		t.Errorf("shard is %d bytes, want 128", got)
	}
	if got := unsafe.Sizeof(tallyBlock{}); got != 128 {
		t.Errorf("tallyBlock is %d bytes, want 128", got)
	}
	if got := unsafe.Sizeof(account{}); got != 256 {
		t.Errorf("account is %d bytes, want 256", got)
	}
	if off := unsafe.Offsetof(account{}.line); off != 128 {
		t.Errorf("account.line at offset %d, want 128", off)
	}
}
