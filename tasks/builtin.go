package tasks

// The built-in tasks, registered under their default names.
func init() {
	for _, c := range []LetterConfig{DefaultReverseConfig(), DefaultSortConfig(), DefaultCopyConfig()} {
		mustRegister(must(NewLetterTask(c)))
	}
	mustRegister(must(NewArithTask(DefaultArithConfig())))
	mustRegister(must(NewGuessTask(DefaultGuessConfig())))
	mustRegister(must(NewGuessTask(DefaultGuessChatConfig())))
	mustRegister(must(NewGridTask(DefaultGridConfig())))
}

func must[T Task](t T, err error) T {
	if err != nil {
		panic(err)
	}
	return t
}
