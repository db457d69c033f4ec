/**
 * Checks tool arguments against the tool's own input schema before the call leaves the store, so
 * a client learns which argument is wrong (400 INVALID_ARGUMENTS, each field named) whether or not
 * the upstream server would have said so itself: the SDK's McpServer answers bad arguments with an
 * `isError` text rather than JSON-RPC -32602.
 */
import { Ajv, type ValidateFunction } from "ajv"
import { Ajv2020 } from "ajv/dist/2020.js"
import addFormatsModule from "ajv-formats"
import type { ToolInfo } from "../mcp/types.js"
import type { FieldProblem } from "./errors.js"

// ajv-formats is CommonJS; its default export arrives wrapped under NodeNext.
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ?? addFormatsModule) as (ajv: Ajv | Ajv2020) => void

const options = { allErrors: true, strict: false, validateFormats: true } as const
const draft7 = new Ajv(options)
const draft2020 = new Ajv2020(options)
addFormats(draft7)
addFormats(draft2020)

/** Compiled validators by tool object (a refreshed tool list brings new objects). */
const compiled = new WeakMap<ToolInfo, ValidateFunction | null>()

const validatorFor = (tool: ToolInfo): ValidateFunction | null => {
  const known = compiled.get(tool)
  if (known !== undefined) return known
  let validate: ValidateFunction | null = null
  try {
    const schema = tool.inputSchema
    const dialect = typeof schema["$schema"] === "string" ? schema["$schema"] : ""
    validate = dialect.includes("2020-12") ? draft2020.compile(schema) : draft7.compile(schema)
  } catch {
    validate = null // a schema we cannot compile is left to the server to judge
  }
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
