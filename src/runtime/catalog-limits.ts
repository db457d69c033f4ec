/**
 * The bounds of the catalog's requests (resources, prompts, completion), apart from its operations
 * (src/runtime/catalog.ts) so that a face can check a client's request against them without
 * importing the room: the faces reach the operations only through the `Catalog` service.
 */

/** How long a read, a prompt or a completion may take (the default of a tool call). */
export const CATALOG_REQUEST_TIMEOUT_MS = 60_000

/** The longest URI or prompt name taken from a client (longer ones cannot be anybody's). */
export const MAX_URI_LENGTH = 8192
