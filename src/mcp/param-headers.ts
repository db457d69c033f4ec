/**
 * The `x-mcp-header` annotations of a tool's input schema (revision 2026-07-28, Streamable HTTP):
 * a parameter so marked is mirrored into an `Mcp-Param-{Name}` header of every tools/call that
 * gives it a value, and a tool whose annotations break the spec's rules must be left out of the
 * tool list. Read once per tools/list; a call only looks its tool's declarations up.
 */

/** One annotated parameter: the header's name part and the `properties` path to the value. */
export interface ParamHeader {
  readonly name: string
  readonly path: ReadonlyArray<string>
}

/** HTTP field-name token characters (RFC 9110 `tchar`). */
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value)

/** Keywords under which a schema is not statically reachable: an annotation there is invalid. */
const UNREACHABLE = ["items", "prefixItems", "additionalProperties", "patternProperties", "oneOf", "anyOf", "allOf", "not", "if", "then", "else", "$defs", "definitions", "dependentSchemas", "contains"]

/**
 * The annotated parameters of an input schema, or why the tool must be left out: an empty or
 * non-token name, a name used twice (case-insensitively), a parameter that is not an integer, a
 * string or a boolean, or an annotation not reachable through `properties` alone.
 */
export const paramHeadersOf = (inputSchema: unknown): { readonly headers: ReadonlyArray<ParamHeader> } | { readonly invalid: string } => {
  const headers: Array<ParamHeader> = []
  const seen = new Set<string>()
  let invalid: string | undefined
  const visit = (schema: unknown, path: ReadonlyArray<string>, reachable: boolean, depth: number): void => {
    if (invalid !== undefined || !isRecord(schema) || depth > 32) return
    const mark = schema["x-mcp-header"]
    if (mark !== undefined) {
      const type = schema["type"]
      if (!reachable || path.length === 0) invalid = `x-mcp-header ${JSON.stringify(mark)} is not reachable through "properties" alone`
      else if (typeof mark !== "string" || !TOKEN.test(mark)) invalid = `x-mcp-header ${JSON.stringify(mark)} is not an HTTP header name token`
      else if (seen.has(mark.toLowerCase())) invalid = `x-mcp-header ${JSON.stringify(mark)} is used twice`
      else if (type !== "string" && type !== "integer" && type !== "boolean") invalid = `x-mcp-header ${JSON.stringify(mark)} is on a parameter of type ${JSON.stringify(type)} (string, integer or boolean only)`
      else {
        seen.add(mark.toLowerCase())
        headers.push({ name: mark, path })
      }
    }
    const properties = schema["properties"]
    if (isRecord(properties)) for (const [key, sub] of Object.entries(properties)) visit(sub, [...path, key], reachable, depth + 1)
    for (const keyword of UNREACHABLE) {
      const sub = schema[keyword]
      if (Array.isArray(sub)) for (const s of sub) visit(s, path, false, depth + 1)
      else if (isRecord(sub) && (keyword === "$defs" || keyword === "definitions" || keyword === "patternProperties" || keyword === "dependentSchemas")) for (const s of Object.values(sub)) visit(s, path, false, depth + 1)
      else visit(sub, path, false, depth + 1)
    }
  }
  visit(inputSchema, [], true, 0)
  return invalid !== undefined ? { invalid } : { headers }
}

/** The header value of an argument (undefined: no header): a string as given, an integer in decimal, a boolean as true/false. */
export const paramHeaderText = (value: unknown): string | undefined => {
  if (typeof value === "string") return value
  if (typeof value === "boolean") return value ? "true" : "false"
  if (typeof value === "number" && Number.isSafeInteger(value)) return String(value)
  return undefined
}

/** The value at a `properties` path of the arguments. */
export const valueAt = (args: unknown, path: ReadonlyArray<string>): unknown => {
  let value = args
  for (const key of path) {
    if (!isRecord(value) || !Object.hasOwn(value, key)) return undefined
    value = value[key]
  }
  return value
}
