/**
 * JSON Schema validation of schemas that upstream servers define, in linear time. A tool's input
 * schema (checked against a call's arguments before it leaves the store, src/runtime/arguments.ts)
 * and output schema (checked by the SDK's Client against the answer) come from the upstream, and
 * their `pattern`s run on the store's one thread: with JavaScript's backtracking RegExp a pattern
 * like `^(a+)+$` against 30 characters takes minutes, and the store answers nothing meanwhile
 * (ReDoS). Here every pattern runs on RE2 (`re2js`, pure JavaScript, linear in the input); one RE2
 * cannot compile (backreferences, lookarounds) is not checked and left to the upstream to judge.
 *
 * One set of ajv instances serves both uses. ajv keeps every schema it compiles for as long as the
 * instance lives (each tool-list refresh and reconnection brings new schema objects), so the
 * instances are replaced after a number of compiles; validators already compiled keep working.
 */
import { Ajv, type CodeOptions, type ErrorObject, type Options, type ValidateFunction } from "ajv"
import { Ajv2020 } from "ajv/dist/2020.js"
import addFormatsModule from "ajv-formats"
import type { JsonSchemaType, JsonSchemaValidator, jsonSchemaValidator } from "@modelcontextprotocol/client"
import { RE2JS } from "re2js"

// ajv-formats is CommonJS; its default export arrives wrapped under NodeNext.
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ?? addFormatsModule) as (ajv: Ajv | Ajv2020) => void

type RegExpEngine = NonNullable<CodeOptions["regExp"]>

/** A compiled pattern as ajv uses it. `toString` must differ per pattern: ajv keys its compiled patterns by it. */
interface PatternCheck {
  test(input: string): boolean
  toString(): string
}

/**
 * ajv's `code.regExp`: builds each `pattern` (and `patternProperties` key) with RE2. The flags
 * (ajv passes "u") need no translation: RE2 always matches by code point. A pattern RE2 cannot
 * compile accepts every string, so a schema using one still checks everything else.
 */
export const linearRegExp: RegExpEngine = Object.assign(
  (pattern: string, flags: string): PatternCheck => {
    const key = `/${pattern}/${flags}`
    try {
      // translateRegExp rewrites ECMAScript syntax RE2 spells differently (\u{...}, (?<name>...), \/).
      const re = RE2JS.compile(RE2JS.translateRegExp(pattern))
      return { test: (input) => re.test(input), toString: () => key }
    } catch {
      return { test: () => true, toString: () => `${key} (not checked)` }
    }
  },
  // Used only when ajv generates standalone code, which the store never does.
  { code: "linearRegExp" }
)

const OPTIONS: Options = {
  allErrors: true,
  // Never stricter than the upstream: unknown keywords and unknown `format`s are ignored (a known
  // format is still checked), and ajv's warnings about them are not logged: the schemas are not ours.
  strict: false,
  validateFormats: true,
  logger: false,
  // A schema's $id must not be registered: two servers may use the same one.
  addUsedSchema: false,
  code: { regExp: linearRegExp }
}

/** Compiles before the instances are replaced (see the top of the file). */
const COMPILES_PER_INSTANCE = 1_000

const newInstances = () => {
  const draft7 = new Ajv(OPTIONS)
  const draft2020 = new Ajv2020(OPTIONS)
  addFormats(draft7)
  addFormats(draft2020)
  return { draft7, draft2020, compiles: 0 }
}

// Made on first use, not when the module loads: the two instances with their formats cost some
// 20 ms of CPU, which a store's start would pay before it listens, whether or not it compiles.
let instances: ReturnType<typeof newInstances> | undefined

/**
 * A validator for `schema` (draft 2020-12 when its `$schema` says so, else draft-07), or null when
 * the schema cannot be compiled: such a schema is left to the server to judge.
 */
export const compileSchema = (schema: Record<string, unknown>): ValidateFunction | null => {
  if (instances === undefined || instances.compiles >= COMPILES_PER_INSTANCE) instances = newInstances()
  const ajv = instances
  ajv.compiles += 1
  const dialect = typeof schema["$schema"] === "string" ? schema["$schema"] : ""
  try {
    return dialect.includes("2020-12") ? ajv.draft2020.compile(schema) : ajv.draft7.compile(schema)
  } catch {
    return null
  }
}

/** Keys whose values are data, not subschemas: left as they are. */
const DATA_KEYS = new Set(["const", "enum", "default", "examples"])

/** Past this nesting the schema is left as it is (ajv judges it, or fails to compile it). */
const MAX_DEPTH = 64

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * `schema` without the `required` entries whose property has a `default`, as an input schema is
 * read by the servers that write it: zod 4's JSON Schema lists a `.default()` field as required
 * (its output type has it), yet the server fills it in when the call leaves it out, so the store
 * must not report it missing (nor inject the default: the upstream applies it). Only the nodes on
 * the way to a changed `required` are copied; a schema with nothing to change comes back as is.
 */
export const withoutDefaultedRequired = (schema: Record<string, unknown>): Record<string, unknown> => {
  const walk = (node: unknown, depth: number): unknown => {
    if (depth > MAX_DEPTH || typeof node !== "object" || node === null) return node
    if (Array.isArray(node)) {
      let copy: Array<unknown> | undefined
      node.forEach((item, i) => {
        const next = walk(item, depth + 1)
        if (next !== item) (copy ??= [...node])[i] = next
      })
      return copy ?? node
    }
    const record = node as Record<string, unknown>
    let copy: Record<string, unknown> | undefined
    for (const key of Object.keys(record)) {
      if (DATA_KEYS.has(key)) continue
      const value = record[key]
      const next = walk(value, depth + 1)
      if (next !== value) (copy ??= { ...record })[key] = next
    }
    const required = record["required"]
    const properties = record["properties"]
    if (Array.isArray(required) && isObject(properties)) {
      const kept = required.filter((name) => {
        const property = typeof name === "string" && Object.hasOwn(properties, name) ? properties[name] : undefined
        return !(isObject(property) && Object.hasOwn(property, "default"))
      })
      if (kept.length !== required.length) (copy ??= { ...record })["required"] = kept
    }
    return copy ?? record
  }
  return walk(schema, 0) as Record<string, unknown>
}

/** ajv's one-line account of validation errors. */
export const errorsText = (errors: ReadonlyArray<ErrorObject> | null | undefined): string =>
  (instances ??= newInstances()).draft7.errorsText(errors === null || errors === undefined ? errors : [...errors])

/**
 * The SDK Client's `jsonSchemaValidator` (it checks `structuredContent` against a tool's output
 * schema): the same linear-time validators. A schema that cannot be compiled accepts everything
 * instead of failing the tool list (the SDK compiles output schemas in `listTools`).
 */
export const upstreamSchemaValidator: jsonSchemaValidator = {
  getValidator<T>(schema: JsonSchemaType): JsonSchemaValidator<T> {
    const validate = compileSchema(schema as Record<string, unknown>)
    return (input) =>
      validate === null || validate(input)
        ? { valid: true, data: input as T, errorMessage: undefined }
        : { valid: false, data: undefined, errorMessage: errorsText(validate.errors) }
  }
}
