/**
 * Checks tool arguments against the tool's own input schema before the call leaves the store, so
 * a client learns which argument is wrong (400 INVALID_ARGUMENTS, each field named) whether or not
 * the upstream server would have said so itself: the SDK's McpServer answers bad arguments with an
 * `isError` text rather than JSON-RPC -32602. Never stricter than the upstream: a required property
 * with a `default` is not reported missing, unknown keywords and formats are ignored. Patterns run in linear time (src/mcp/json-schema.ts):
 * a schema's `pattern` cannot make a call hold up the store.
 */
import type { ValidateFunction } from "ajv"
import { compileSchema, withoutDefaultedRequired } from "../mcp/json-schema.js"
import type { ToolInfo } from "../mcp/types.js"
import type { FieldProblem } from "../domain/errors.js"

/** Compiled validators by tool object (a refreshed tool list brings new objects). */
const compiled = new WeakMap<ToolInfo, ValidateFunction | null>()

const validatorFor = (tool: ToolInfo): ValidateFunction | null => {
  const known = compiled.get(tool)
  if (known !== undefined) return known
  // A schema we cannot compile (null) is left to the server to judge. A required property with a
  // default is the server's to fill in: not reported missing.
  const validate = compileSchema(withoutDefaultedRequired(tool.inputSchema))
  compiled.set(tool, validate)
  return validate
}

/** The problems of `args` for `tool`; empty when they are valid (or the schema cannot be used). */
export const argumentProblems = (tool: ToolInfo, args: Record<string, unknown>): ReadonlyArray<FieldProblem> => {
  const validate = validatorFor(tool)
  if (validate === null || validate(args)) return []
  return (validate.errors ?? []).map((e) => {
    const path = e.instancePath.split("/").filter((p) => p !== "").join(".")
    const missing = e.keyword === "required" ? String((e.params as { missingProperty?: string }).missingProperty) : ""
    const field = ["args", path, missing].filter((p) => p !== "").join(".")
    return { field, problem: e.keyword === "required" ? "is required" : (e.message ?? "is invalid") }
  })
}
