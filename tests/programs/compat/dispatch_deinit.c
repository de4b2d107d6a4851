/*
 * Built into the test programs and extension only when the tests run on a
 * libomp older than 19 (OMPTPY_TEST_LIBOMP, see tests/conftest.py).
 *
 * clang 19 ends every dynamically scheduled loop with a call to
 * __kmpc_dispatch_deinit, an entry point that libomp 14 and 16 do not export
 * (the program would stop with "undefined symbol: __kmpc_dispatch_deinit").
 * libomp 19 defines it as an empty function (its body is one `ret`), so this
 * definition changes nothing but the symbol's availability.  Hidden: the
 * program's own calls bind to it, nothing else sees it.
 */
typedef struct ident ident_t;

__attribute__((visibility("hidden"))) void __kmpc_dispatch_deinit(ident_t *loc, int gtid);

void __kmpc_dispatch_deinit(ident_t *loc, int gtid) {
  (void)loc;
  (void)gtid;
}
