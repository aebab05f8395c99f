package bytesize

import "testing"

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {57352, "56.0 KiB"}, {3 << 20, "3.0 MiB"}, {2867600000000, "2.6 TiB"}} {
		if got := Format(c.n); got != c.want {
			t.Errorf("Format(%d) = %q, want %q", c.n, got, c.want)
		}
	}
	if got := Format(uint64(5 << 30)); got != "5.0 GiB" {
		t.Errorf("Format(uint64) = %q", got)
	}
}
