package slots

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// refCRC16 is the textbook bit-at-a-time CRC-16/XMODEM, sharing no code or
// table with the implementation under test.
func refCRC16(p string) uint16 {
	var crc uint16
	for i := 0; i < len(p); i++ {
		crc ^= uint16(p[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// refSlot transcribes Redis Cluster's keyHashSlot (cluster.c) literally.
func refSlot(key string) int {
	s := strings.IndexByte(key, '{')
	if s < 0 {
		return int(refCRC16(key) & 0x3FFF)
	}
	e := strings.IndexByte(key[s+1:], '}')
	if e <= 0 { // no '}' after the '{', or nothing between them
		return int(refCRC16(key) & 0x3FFF)
	}
	return int(refCRC16(key[s+1:s+1+e]) & 0x3FFF)
}

// vectors come from the issue; 12739 for "123456789" also follows from the
// CRC-16/XMODEM check value 0x31C3.
var vectors = []struct {
	key  string
	slot int
}{
	{"123456789", 12739},
	{"somekey", 11058},
	{"foo{hash_tag}", 2515},
	{"bar{hash_tag}", 2515},
	{"{}foo", 9500},
	{"foo{}", 5542},
	{"foo{}{bar}", 8363},
	{"{user1}.following", 8106},
}

func TestSlotVectors(t *testing.T) {
	for _, v := range vectors {
		got, err := Slot(v.key)
		if err != nil || got != v.slot {
			t.Errorf("Slot(%q) = %d, %v; want %d", v.key, got, err, v.slot)
		}
		if ref := refSlot(v.key); ref != v.slot {
			t.Errorf("reference slot(%q) = %d; want %d (the reference is wrong)", v.key, ref, v.slot)
		}
	}
}

func TestCRCCheckValue(t *testing.T) {
	// The catalogued check value of CRC-16/XMODEM.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#04x, want 0x31c3", got)
	}
	if got := refCRC16("123456789"); got != 0x31C3 {
		t.Fatalf("reference crc16(123456789) = %#04x, want 0x31c3", got)
	}
}

func TestSlotHashTags(t *testing.T) {
	same := [][]string{
		{"user1", "{user1}", "{user1}.following", "x{user1}y", "x{user1}{other}", "x{user1}}"},
		{"{a", "{a"},         // no closing brace: whole key
		{"a}b{c}", "c"},      // the '}' before the first '{' does not count
		{"{{a}", "{a"},       // tag is "{a"
		{"x{}{y}", "x{}{y}"}, // first tag empty: whole key, not "y"
	}
	for _, group := range same {
		want, _ := Slot(group[0])
		for _, k := range group[1:] {
			if got, _ := Slot(k); got != want {
				t.Errorf("Slot(%q) = %d, want %d like Slot(%q)", k, got, want, group[0])
			}
		}
	}
	// An empty tag must hash the whole key, so these two differ from the
	// slot of "foo" and from each other.
	foo, _ := Slot("foo")
	a, _ := Slot("{}foo")
	b, _ := Slot("foo{}")
	if a == foo || b == foo || a == b {
		t.Errorf("empty tags: Slot({}foo)=%d Slot(foo{})=%d Slot(foo)=%d; want all different", a, b, foo)
	}
}

func TestSlotEmptyKey(t *testing.T) {
	if s, err := Slot(""); s != -1 || !errors.Is(err, ErrEmptyKey) {
		t.Errorf("Slot(\"\") = %d, %v; want -1, ErrEmptyKey", s, err)
	}
}

func TestSlotMatchesReference(t *testing.T) {
	// Every length across the 8-, 4- and 1-byte paths, braces at every
	// position relative to block boundaries.
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("ab{}\x00\xff")
	for n := 1; n <= 40; n++ {
		for range 300 {
			buf := make([]byte, n)
			for i := range buf {
				if rng.IntN(3) == 0 {
					buf[i] = alphabet[rng.IntN(len(alphabet))]
				} else {
					buf[i] = byte(rng.UintN(256))
				}
			}
			key := string(buf)
			want := refSlot(key)
			if got, _ := Slot(key); got != want {
				t.Fatalf("Slot(%q) = %d, reference %d", key, got, want)
			}
		}
	}
}

func TestSlotAllocs(t *testing.T) {
	key := "tenant-000123"
	tagged := "x{tenant-000123}y"
	if n := testing.AllocsPerRun(100, func() { _, _ = Slot(key) }); n != 0 {
		t.Errorf("Slot allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = Slot(tagged) }); n != 0 {
		t.Errorf("Slot of a tagged key allocates %v times", n)
	}
}

func FuzzSlot(f *testing.F) {
	for _, v := range vectors {
		f.Add(v.key)
	}
	f.Add("{")
	f.Add("}{")
	f.Add("0123456{89abcdef}")
	f.Fuzz(func(t *testing.T, key string) {
		got, err := Slot(key)
		if key == "" {
			if !errors.Is(err, ErrEmptyKey) {
				t.Fatalf("Slot(\"\") = %d, %v; want ErrEmptyKey", got, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Slot(%q): %v", key, err)
		}
		if want := refSlot(key); got != want {
			t.Fatalf("Slot(%q) = %d, reference %d", key, got, want)
		}
	})
}

// benchKeys are typical tenant ids, from short to long, plus a tagged key.
var benchKeys = []struct{ name, key string }{
	{"4B", "acme"},
	{"9B", "123456789"},
	{"13B", "tenant-000123"},
	{"36B", "3f2504e0-4f89-41d3-9a0c-0305e82c3301"},
	{"tagged", "{user1}.following"},
}

var sinkInt int

// BenchmarkSlot measures Slot; BenchmarkSlotBaseline runs the classic
// one-table byte-at-a-time CRC with the same hash-tag rule in the same run,
// so the ratio shows what slicing-by-8 buys on this machine.
func BenchmarkSlot(b *testing.B) {
	for _, k := range benchKeys {
		b.Run(k.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s, _ := Slot(k.key)
				sinkInt += s
			}
		})
	}
}

func BenchmarkSlotBaseline(b *testing.B) {
	for _, k := range benchKeys {
		b.Run(k.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sinkInt += oneTableSlot(k.key)
			}
		})
	}
}

func oneTableSlot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc = crc<<8 ^ crcTables[0][byte(crc>>8)^key[i]]
	}
	return int(crc & MaxSlot)
}
