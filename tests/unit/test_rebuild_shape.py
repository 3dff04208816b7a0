"""Which staged files a rebuild may take: read under the table's new key and the new types of its
converted columns, every converted column there under its new name."""
import pyarrow as pa

from dblog.merge.rebuild import Shape


def staged(key: str, **columns: pa.DataType) -> pa.Schema:
    return pa.schema([pa.field(n, t) for n, t in columns.items()], metadata={b"dblog.key": key.encode()})


def test_a_file_fits_the_new_shape_only_with_the_new_key_and_every_converted_column_s_new_type():
    shape = Shape(["id"], {"qty": "string"})
    assert shape.fits(staged("id", id=pa.int64(), qty=pa.string()))
    assert not shape.fits(staged("id", id=pa.int64(), qty=pa.int64()))          # read before the conversion
    assert not shape.fits(staged("code", code=pa.int64(), qty=pa.string()))     # another key
    assert not shape.fits(staged("id", id=pa.int64(), amount=pa.string()))      # read before a rename to qty
    assert Shape(["id"]).fits(staged("id", id=pa.int64(), qty=pa.int64()))      # a key change alone
