//go:build !race

package bridgetrain

const raceEnabled = false
