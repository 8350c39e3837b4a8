package buildinfo

// Version is the asyncrl release; "dev" for an unstamped build.
var Version = "dev"
