// Package bytesize writes byte counts for people, the same way in every
// log line, report and page of aerie: binary units, one decimal.
package bytesize

import "fmt"

// Format renders n in binary units: "512 B", "3.0 MiB", "1.2 TiB".
func Format[T int | int64 | uint64](n T) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n)
	suffix := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i := -1
	for v >= unit && i < len(suffix)-1 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %s", v, suffix[i])
}
