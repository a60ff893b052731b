package dev.sonde.client;

/**
 * One tag of a point: {@code key=value} on the wire.
 *
 * <p>A tag is checked when it is made, so a {@code static final Tag} is
 * validated once and costs nothing per emit: keys must be non-empty, and
 * neither keys nor values may contain {@code |}, {@code =}, a space,
 * {@code \n} or {@code \r}. Values may be empty.
 *
 * @param key the tag key
 * @param value the tag value
 */
public record Tag(String key, String value) {

    /**
     * Makes a tag.
     *
     * @param key the tag key, non-empty
     * @param value the tag value, possibly empty
     * @throws IllegalArgumentException if the key or value breaks the rules above
     * @throws NullPointerException if the key or value is null
     */
    public Tag {
        Validation.checkTagKey(key);
        Validation.checkTagValue(key, value);
    }

    /**
     * Makes a tag; the same as {@code new Tag(key, value)}.
     *
     * @param key the tag key, non-empty
     * @param value the tag value, possibly empty
     * @return the tag
     * @throws IllegalArgumentException if the key or value contains a forbidden character
     */
    public static Tag of(String key, String value) {
        return new Tag(key, value);
    }

    /** The tag as it goes on the wire, {@code key=value}. */
    @Override
    public String toString() {
        return key + "=" + value;
    }
}
