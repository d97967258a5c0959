/* test_tokenizer_json.h: a hand-made SentencePiece-style tokenizer.json for the command's
 * tests (9 tokens; "hi hi" encodes to <s> ▁hi ▁hi: the post-processor adds <s> only). */
#ifndef PE_TEST_TOKENIZER_JSON_H
#define PE_TEST_TOKENIZER_JSON_H

static const char *const tt_spm_json =
    "{\"added_tokens\": [{\"id\": 1, \"content\": \"<s>\", \"special\": true, \"lstrip\": false, "
    "\"rstrip\": false, \"normalized\": false, \"single_word\": false}, {\"id\": 2, \"content\": "
    "\"</s>\", \"special\": true, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, "
    "\"single_word\": false}], \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Metaspace\", "
    "\"replacement\": \"\xE2\x96\x81\", \"prepend_scheme\": \"first\", \"split\": false}, "
    "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": "
    "{\"id\": \"<s>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], "
    "\"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [1], \"tokens\": [\"<s>\"]}}}, "
    "\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Metaspace\", "
    "\"replacement\": \"\xE2\x96\x81\", \"prepend_scheme\": \"first\"}, {\"type\": "
    "\"ByteFallback\"}, {\"type\": \"Fuse\"}]}, \"model\": {\"type\": \"BPE\", \"unk_token\": "
    "\"<unk>\", \"byte_fallback\": true, \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2, "
    "\"\xE2\x96\x81\": 3, \"h\": 4, \"i\": 5, \"\xE2\x96\x81h\": 6, \"\xE2\x96\x81hi\": 7, "
    "\"\\\"\": 8}, \"merges\": [\"\xE2\x96\x81 h\", \"\xE2\x96\x81h i\"]}}";

#endif
