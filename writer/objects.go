package writer

// OpenObjects returns how many HDF5 identifiers (files, groups, datasets,
// types, attributes) the process holds open, of every file: 0 once every
// Writer and Reader is closed. Tests use it to find leaks.
func OpenObjects() int { return openObjectsAll() }
