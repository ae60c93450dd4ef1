/**
 * Settings onnxruntime reads from the environment when its native library loads, so this module is
 * imported before onnxruntime-node (ES modules evaluate their imports in order).
 * ORT_DISABLE_TELEMETRY: without it the library leaves an empty /tmp/mat-debug-<pid>.log behind
 * on every run (its telemetry SDK's debug log). A user's own setting wins.
 */
process.env.ORT_DISABLE_TELEMETRY ??= '1';
