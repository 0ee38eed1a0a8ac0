# Sourced by the tests that check a model against numpy: exits 77 (ctest's
# SKIP_RETURN_CODE) with the reason and the fix when python3 or numpy is
# missing.
if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIP: python3 is not installed"
  exit 77
fi
if ! reason=$(python3 -c "import numpy" 2>&1); then
  echo "SKIP: python3 cannot import numpy (${reason##*$'\n'});" \
       "install it with: python3 -m pip install numpy"
  exit 77
fi
