/**
 * The route table as tests need it: every endpoint of the contract with its path parameters, query
 * parameters and payload described as JSON Schemas derived from the very Effect schemas the server
 * decodes with (so a test that walks this list covers endpoints added later without being edited).
 */
import type { Option, Schema } from "effect"

/** effect's modules, loaded by `endpointSpecs` (with the contract) when a test first walks the routes. */
let effect: typeof import("effect")

/** A JSON Schema object as Effect's `JSONSchema.make` writes it. */
export type JsonSchema = {
  readonly type?: string
  readonly enum?: ReadonlyArray<unknown>
  readonly anyOf?: ReadonlyArray<JsonSchema>
  readonly oneOf?: ReadonlyArray<JsonSchema>
  readonly properties?: Readonly<Record<string, JsonSchema>>
  readonly required?: ReadonlyArray<string>
  readonly items?: JsonSchema
  readonly additionalProperties?: boolean | JsonSchema
  readonly minimum?: number
  readonly maximum?: number
  readonly exclusiveMinimum?: number
  readonly exclusiveMaximum?: number
  readonly minLength?: number
  readonly maxLength?: number
  readonly minItems?: number
  readonly maxItems?: number
  readonly pattern?: string
  readonly $ref?: string
  readonly $defs?: Readonly<Record<string, JsonSchema>>
  readonly $id?: string
}

/** One named input (a query parameter or a payload field). */
export interface Field {
  readonly name: string
  readonly required: boolean
  /** The decoded (type) side: numbers with their bounds, enums, string limits. */
  readonly schema: JsonSchema
}

/** What an endpoint accepts as its body. */
export type Payload =
  | { readonly kind: "none" }
  /** A JSON object with known fields; `nullable` when `null` (or no body) means "no fields". */
  | { readonly kind: "object"; readonly nullable: boolean; readonly fields: ReadonlyArray<Field> }
  /** A body the schema does not describe field by field (decoded by the store itself). */
  | { readonly kind: "opaque" }

/** An endpoint of the route table, with its inputs. */
export interface EndpointSpec {
  readonly group: string
  readonly name: string
  readonly method: string
  /** The route pattern, e.g. `/for_agent/:agent_id/delete_service/:service_name`. */
  readonly path: string
  /** The same path as OpenAPI writes it: `/for_agent/{agent_id}/delete_service/{service_name}`. */
  readonly openApiPath: string
  readonly pathParams: ReadonlyArray<string>
  readonly query: ReadonlyArray<Field>
  readonly payload: Payload
}

/** `:name` segments to `{name}`. */
export const toOpenApiPath = (path: string): string => path.replace(/:([A-Za-z_][A-Za-z0-9_]*)/g, "{$1}")

/**
 * `schema` with every `$ref` replaced by its definition, at any depth: named schemas (the domain's
 * `ServiceName`, `ToolName`, ...) are written once under `$defs` and referred to where they are used.
 */
const inlineRefs = (schema: unknown, root: JsonSchema): unknown => {
  if (Array.isArray(schema)) return schema.map((s) => inlineRefs(s, root))
  if (typeof schema !== "object" || schema === null) return schema
  const ref = (schema as JsonSchema).$ref
  if (ref !== undefined) {
    const m = /^#\/\$defs\/(.+)$/.exec(ref)
    const target = m ? root.$defs?.[m[1]!] : undefined
    if (target === undefined) throw new Error(`unresolved $ref ${ref}`)
    return inlineRefs(target, root)
  }
  return Object.fromEntries(Object.entries(schema).filter(([k]) => k !== "$defs").map(([k, v]) => [k, inlineRefs(v, root)]))
}

const jsonSchemaOf = (schema: Schema.Schema.Any): JsonSchema | undefined => {
  try {
    const root = effect.JSONSchema.make(schema) as JsonSchema
    return inlineRefs(root, root) as JsonSchema
  } catch {
    return undefined
  }
}

const isUnknown = (s: JsonSchema | undefined) =>
  s === undefined || s.$id === "/schemas/unknown" || (s.type === undefined && s.anyOf === undefined && s.oneOf === undefined && s.enum === undefined)

/** Fields of an object schema: types from the decoded side, `required` from the wire side (defaults make a key optional). */
const fieldsOf = (typeSide: JsonSchema, wireSide: JsonSchema | undefined): ReadonlyArray<Field> => {
  const required = new Set(wireSide?.required ?? typeSide.required ?? [])
  return Object.entries(typeSide.properties ?? {}).map(([name, schema]) => ({ name, required: required.has(name), schema }))
}

const objectMember = (s: JsonSchema): JsonSchema | undefined =>
  s.type === "object" && s.properties !== undefined ? s : s.anyOf?.find((m) => m.type === "object" && m.properties !== undefined)

const payloadOf = (schema: Schema.Schema.Any): Payload => {
  const typeSide = jsonSchemaOf(effect.Schema.typeSchema(schema))
  const wireSide = jsonSchemaOf(effect.Schema.encodedSchema(schema))
  if (typeSide === undefined || isUnknown(typeSide)) return { kind: "opaque" }
  const object = objectMember(typeSide)
  const others = typeSide.anyOf?.filter((m) => m !== object) ?? []
  if (object === undefined || others.some((m) => m.type !== "null")) return { kind: "opaque" }
  const wireObject = wireSide !== undefined ? objectMember(wireSide) : undefined
  return { kind: "object", nullable: others.length > 0, fields: fieldsOf(object, wireObject) }
}

const queryOf = (schema: Schema.Schema.Any): ReadonlyArray<Field> => {
  const typeSide = jsonSchemaOf(effect.Schema.typeSchema(schema))
  const wireSide = jsonSchemaOf(effect.Schema.encodedSchema(schema))
  return typeSide === undefined ? [] : fieldsOf(typeSide, wireSide)
}

interface EndpointLike {
  readonly pathSchema: Option.Option<Schema.Schema.Any>
  readonly urlParamsSchema: Option.Option<Schema.Schema.Any>
  readonly payloadSchema: Option.Option<Schema.Schema.Any>
}

const endpointOf = (groups: Readonly<Record<string, unknown>>, group: string, name: string): EndpointLike => {
  for (const g of Object.values(groups) as ReadonlyArray<{ identifier: string; endpoints: Record<string, EndpointLike> }>) {
    if (g.identifier === group && g.endpoints[name] !== undefined) return g.endpoints[name]
  }
  throw new Error(`endpoint ${group}.${name} of the route table is not in Api.groups`)
}

const hasBody = (method: string) => method === "POST" || method === "PUT" || method === "PATCH"

/**
 * Every endpoint of `routeTable()`, with its inputs. The contract (src/http/Api.ts) and effect are
 * loaded here, when asked for, so that a test that does not walk the routes does not pay for them.
 */
export const endpointSpecs = async (): Promise<ReadonlyArray<EndpointSpec>> => {
  effect = await import("effect")
  const { Api, routeTable } = await import("../../src/http/Api.js")
  return routeTable().map((route) => {
    const endpoint = endpointOf(Api.groups, route.group, route.name)
    const query = effect.Option.match(endpoint.urlParamsSchema, { onNone: () => [] as ReadonlyArray<Field>, onSome: queryOf })
    // A GET or DELETE endpoint's "payload" is decoded from the query string.
    const payloadQuery = !hasBody(route.method) && effect.Option.isSome(endpoint.payloadSchema) ? queryOf(endpoint.payloadSchema.value) : []
    const payload: Payload =
      hasBody(route.method) && effect.Option.isSome(endpoint.payloadSchema) ? payloadOf(endpoint.payloadSchema.value) : { kind: "none" }
    return {
      group: route.group,
      name: route.name,
      method: route.method,
      path: route.path,
      openApiPath: toOpenApiPath(route.path),
      pathParams: [...route.path.matchAll(/:([A-Za-z_][A-Za-z0-9_]*)/g)].map((m) => m[1]!),
      query: [...query, ...payloadQuery],
      payload
    }
  })
}

/** The route pattern with its parameters filled in (values are URL-encoded here unless `raw`). */
export const fillPath = (path: string, values: Readonly<Record<string, string>>, raw: ReadonlyArray<string> = []): string =>
  path.replace(/:([A-Za-z_][A-Za-z0-9_]*)/g, (_, name: string) => {
    const v = values[name]
    if (v === undefined) throw new Error(`no value for path parameter ${name} of ${path}`)
    return raw.includes(name) ? v : encodeURIComponent(v)
  })
