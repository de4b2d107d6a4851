/*
 * format_rows(): the text of the exports' JSON and CSV lines, written from
 * integer columns through a template without the GIL.
 */
#include "ext.h"

/* format_rows(parts, columns): rows of text, one per row of the columns, each
 * parts[0] value[0] parts[1] value[1] ... parts[k] (the export's JSON and CSV
 * lines).  A column is (kind, values, missing, null, table): values an integer
 * array (1, 2, 4 or 8-byte items, signed or not); missing None or a byte per
 * row (nonzero: the value is `null`, bytes); table, for FORMAT_TEXT, a tuple of
 * bytes.  The kinds are ext.h's FORMAT_*. */

typedef struct {
  int kind;
  omptpy_ints ints;
  const unsigned char *missing;
  const char *null;
  Py_ssize_t null_len;
  const char **text;
  Py_ssize_t *text_len, ntext;
} format_column;

int omptpy_ints_from(const Py_buffer *buf, omptpy_ints *ints, const char *what) {
  /* The struct format of the items: a letter, lower case for signed integers. */
  const char *format = buf->format ? buf->format : "B";
  char letter = *format ? format[strlen(format) - 1] : 'B';
  ints->values = buf->buf;
  ints->itemsize = buf->itemsize;
  ints->is_signed = letter == 'b' || letter == 'h' || letter == 'i' || letter == 'l' || letter == 'q';
  ints->n = buf->itemsize ? buf->len / buf->itemsize : 0;
  if (!strchr("bBhHiIlLqQ?", letter) ||
      (ints->itemsize != 1 && ints->itemsize != 2 && ints->itemsize != 4 && ints->itemsize != 8)) {
    PyErr_Format(PyExc_ValueError, "%s: an array of integers of 1, 2, 4 or 8 bytes", what);
    return -1;
  }
  return 0;
}

static int not_got(Py_buffer *b) {
  PyBuffer_Release(b);
  b->obj = NULL;
  return -1;
}

int omptpy_get_ints(PyObject *obj, Py_buffer *b, omptpy_ints *ints, Py_ssize_t *n,
                    const char *what) {
  if (PyObject_GetBuffer(obj, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
  if (omptpy_ints_from(b, ints, what) < 0) return not_got(b);
  if (*n >= 0 && ints->n != *n) {
    PyErr_Format(PyExc_ValueError, "%s: %zd items where %zd were expected", what, ints->n, *n);
    return not_got(b);
  }
  *n = ints->n;
  return 0;
}

void *omptpy_get_items(PyObject *obj, Py_buffer *b, Py_ssize_t size, Py_ssize_t *n, int writable,
                       const char *what) {
  int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj, b, flags) < 0) return NULL;
  omptpy_ints ints;
  if (omptpy_ints_from(b, &ints, what) < 0) {
    not_got(b);
    return NULL;
  }
  if (ints.itemsize != size || (*n >= 0 && ints.n != *n)) {
    PyErr_Format(PyExc_ValueError, "%s: %zd-byte integers%s expected", what, size,
                 *n >= 0 ? ", as many as the other arrays'," : "");
    not_got(b);
    return NULL;
  }
  *n = ints.n;
  return b->buf;
}

static const char digit_pairs[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

static char *put_decimal(char *p, uint64_t v) {
  char tmp[20], *t = tmp + sizeof tmp;
  while (v >= 100) {
    t -= 2;
    memcpy(t, digit_pairs + 2 * (v % 100), 2);
    v /= 100;
  }
  if (v >= 10) {
    t -= 2;
    memcpy(t, digit_pairs + 2 * v, 2);
  } else {
    *--t = (char)('0' + v);
  }
  size_t n = (size_t)(tmp + sizeof tmp - t);
  memcpy(p, t, n);
  return p + n;
}

static char *put_value(char *p, const format_column *c, Py_ssize_t i) {
  if (c->missing && c->missing[i]) {
    memcpy(p, c->null, (size_t)c->null_len);
    return p + c->null_len;
  }
  int negative;
  uint64_t u = omptpy_ints_get(&c->ints, i, &negative);
  switch (c->kind) {
    case FORMAT_NUMBER:
      if (negative) *p++ = '-';
      return put_decimal(p, u);
    case FORMAT_MICROS: {
      uint64_t mag = u;
      if (negative) *p++ = '-';
      p = put_decimal(p, mag / 1000);
      *p++ = '.';
      memcpy(p, digit_pairs + 2 * (mag % 1000 / 10), 2);
      p[2] = (char)('0' + mag % 10);
      return p + 3;
    }
    case FORMAT_HEX: {
      static const char hex[] = "0123456789abcdef";
      char tmp[16], *t = tmp + sizeof tmp;
      do {
        *--t = hex[u & 15];
        u >>= 4;
      } while (u);
      size_t n = (size_t)(tmp + sizeof tmp - t);
      memcpy(p, "\"0x", 3);
      memcpy(p + 3, t, n);
      p[3 + n] = '"';
      return p + 4 + n;
    }
    default: {
      const char *text = c->null;
      Py_ssize_t len = c->null_len;
      if (!negative && u < (uint64_t)c->ntext) text = c->text[u], len = c->text_len[u];
      memcpy(p, text, (size_t)len);
      return p + len;
    }
  }
}

int omptpy_bytes_table(PyObject *table, const char ***text, Py_ssize_t **len, Py_ssize_t *n,
                       Py_ssize_t *longest) {
  *n = PyTuple_GET_SIZE(table);
  *text = PyMem_Calloc((size_t)*n + 1, sizeof **text);
  *len = PyMem_Calloc((size_t)*n + 1, sizeof **len);
  if (!*text || !*len) {
    PyErr_NoMemory();
    return -1;
  }
  *longest = 0;
  for (Py_ssize_t t = 0; t < *n; t++) {
    if (PyBytes_AsStringAndSize(PyTuple_GET_ITEM(table, t), (char **)&(*text)[t], &(*len)[t]) < 0)
      return -1;
    if ((*len)[t] > *longest) *longest = (*len)[t];
  }
  return 0;
}

PyObject *omptpy_py_format_rows(PyObject *m, PyObject *args) {
  (void)m;
  PyObject *parts, *columns, *result = NULL;
  if (!PyArg_ParseTuple(args, "O!O!", &PyTuple_Type, &parts, &PyList_Type, &columns)) return NULL;
  Py_ssize_t ncol = PyList_GET_SIZE(columns);
  if (ncol < 1 || PyTuple_GET_SIZE(parts) != ncol + 1) {
    PyErr_SetString(PyExc_ValueError, "format_rows: one column or more, and one part more");
    return NULL;
  }
  format_column *col = PyMem_Calloc((size_t)ncol, sizeof *col);
  Py_buffer *values = PyMem_Calloc((size_t)ncol, sizeof *values);
  Py_buffer *missing = PyMem_Calloc((size_t)ncol, sizeof *missing);
  const char **part = PyMem_Calloc((size_t)ncol + 1, sizeof *part);
  Py_ssize_t *part_len = PyMem_Calloc((size_t)ncol + 1, sizeof *part_len);
  Py_ssize_t n = -1, row_bound = 0;
  if (!col || !values || !missing || !part || !part_len) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t k = 0; k <= ncol; k++) {
    if (PyBytes_AsStringAndSize(PyTuple_GET_ITEM(parts, k), (char **)&part[k], &part_len[k]) < 0)
      goto done;
    row_bound += part_len[k];
  }
  for (Py_ssize_t k = 0; k < ncol; k++) {
    format_column *c = &col[k];
    PyObject *vals, *miss, *null, *table;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(columns, k), "iOOO!O", &c->kind, &vals, &miss,
                          &PyBytes_Type, &null, &table))
      goto done;
    if (PyObject_GetBuffer(vals, &values[k], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
    if (miss != Py_None && PyObject_GetBuffer(miss, &missing[k], PyBUF_SIMPLE) < 0) goto done;
    if (omptpy_ints_from(&values[k], &c->ints, "format_rows") < 0) goto done;
    if (n < 0) n = c->ints.n;
    if (c->kind < 0 || c->kind >= FORMAT_KINDS || c->ints.n != n ||
        (missing[k].obj && missing[k].len < n) || (c->kind == FORMAT_TEXT) != (table != Py_None) ||
        (table != Py_None && !PyTuple_Check(table))) {
      PyErr_SetString(PyExc_ValueError, "format_rows: a column of another length or kind");
      goto done;
    }
    c->missing = missing[k].obj ? missing[k].buf : NULL;
    c->null = PyBytes_AS_STRING(null);
    c->null_len = PyBytes_GET_SIZE(null);
    Py_ssize_t width = c->kind == FORMAT_MICROS ? 25 : 24;
    if (table != Py_None) {
      if (omptpy_bytes_table(table, &c->text, &c->text_len, &c->ntext, &width) < 0) goto done;
    }
    row_bound += width > c->null_len ? width : c->null_len;
  }
  if (n > 0 && row_bound > PY_SSIZE_T_MAX / n) {
    PyErr_NoMemory();
    goto done;
  }
  result = PyBytes_FromStringAndSize(NULL, n * row_bound);
  if (!result) goto done;
  char *start = PyBytes_AS_STRING(result), *p = start;
  Py_BEGIN_ALLOW_THREADS for (Py_ssize_t i = 0; i < n; i++) {
    for (Py_ssize_t k = 0; k < ncol; k++) {
      memcpy(p, part[k], (size_t)part_len[k]);
      p = put_value(p + part_len[k], &col[k], i);
    }
    memcpy(p, part[ncol], (size_t)part_len[ncol]);
    p += part_len[ncol];
  }
  Py_END_ALLOW_THREADS if (_PyBytes_Resize(&result, p - start) < 0) result = NULL;
done:
  for (Py_ssize_t k = 0; col && values && missing && k < ncol; k++) {
    PyMem_Free(col[k].text);
    PyMem_Free(col[k].text_len);
    if (values[k].obj) PyBuffer_Release(&values[k]);
    if (missing[k].obj) PyBuffer_Release(&missing[k]);
  }
  PyMem_Free(col);
  PyMem_Free(values);
  PyMem_Free(missing);
  PyMem_Free(part);
  PyMem_Free(part_len);
  return result;
}

