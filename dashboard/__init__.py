"""UI helpers of the Streamlit dashboard (not page scripts): URL state, the chart, exports."""
