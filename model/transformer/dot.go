package transformer

// dot and dot4 are the inner products every matmul and attention score
// uses (see dotGo for the order of additions).
var (
	dot  = dotGo
	dot4 = dot4Go
)
