/* A library with a wrapped library's soname and none of its functions. */
int es_empty_library_marker;
