//! Engine reports as Python dicts, through their serde form, so the dicts
//! follow the engine's structs without a hand-kept copy of their fields.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use pyo3::IntoPyObjectExt;
use serde::Serialize;
use serde_json::Value;

/// A report as a dict; durations (`{secs, nanos}` in serde) become float
/// seconds.
pub fn to_dict<'py>(py: Python<'py>, report: &impl Serialize) -> PyResult<Bound<'py, PyDict>> {
    let value = serde_json::to_value(report)
        .map_err(|e| crate::errors::ReboundError::new_err(e.to_string()))?;
    Ok(to_python(py, &value)?.cast_into::<PyDict>()?)
}

fn to_python<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    match value {
        Value::Null => Ok(py.None().into_bound(py)),
        Value::Bool(b) => b.into_bound_py_any(py),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => u.into_bound_py_any(py),
            (None, Some(i)) => i.into_bound_py_any(py),
            _ => n.as_f64().unwrap_or(f64::NAN).into_bound_py_any(py),
        },
        Value::String(s) => s.into_bound_py_any(py),
        Value::Array(items) => {
            let items: PyResult<Vec<_>> = items.iter().map(|v| to_python(py, v)).collect();
            Ok(PyList::new(py, items?)?.into_any())
        }
        Value::Object(fields) => match duration_seconds(value) {
            Some(seconds) => seconds.into_bound_py_any(py),
            None => {
                let dict = PyDict::new(py);
                for (name, field) in fields {
                    dict.set_item(name, to_python(py, field)?)?;
                }
                Ok(dict.into_any())
            }
        },
    }
}

/// Seconds of a serde duration: an object of exactly `secs` and `nanos`.
fn duration_seconds(value: &Value) -> Option<f64> {
    let fields = value.as_object()?;
    let secs = fields.get("secs")?.as_u64()?;
    let nanos = fields.get("nanos")?.as_u64()?;
    (fields.len() == 2).then(|| secs as f64 + nanos as f64 / 1e9)
}
