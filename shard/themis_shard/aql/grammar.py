"""The AQL grammar (lark, LALR(1)), kept in Python so it ships with the package whatever the
packaging of data files; ``parser.py`` compiles it once per process."""

GRAMMAR = r"""
// AQL: the Themis query language over documents, vectors and inference.
// LALR(1); keywords are case-insensitive and reserved (use d["limit"] for such attribute names).

start: [EXPLAIN] query

query: operation* terminal

?operation: "FOR"i NAME "IN"i expr                          -> for_op
          | "FOR"i NAME "IN"i COLLECTION_BIND               -> for_bind
          | "FILTER"i expr                                   -> filter_op
          | "LET"i NAME "=" expr                             -> let_op
          | "SORT"i sort_item ("," sort_item)*               -> sort_op
          | "LIMIT"i expr ["," expr]                         -> limit_op

sort_item: expr [ASC | DESC]

?terminal: "RETURN"i [DISTINCT] expr                                     -> return_op
         | "INSERT"i expr "INTO"i collection                             -> insert_op
         | "UPDATE"i postfix "WITH"i postfix "IN"i collection            -> update_op
         | "REMOVE"i postfix "IN"i collection                            -> remove_op
         | "UPSERT"i expr "INSERT"i expr "UPDATE"i postfix "IN"i collection -> upsert_op
         | "INFER"i model expr infer_clause*                             -> infer_op
         | "EMBED"i "DOCUMENT"i expr                                     -> embed_document_op
         | "EMBED"i expr ["MODEL"i model]                                -> embed_op
         | "RAG"i expr "FROM"i collection rag_clause*                    -> rag_op

?infer_clause: "DOMAIN"i expr          -> domain
             | "LORA"i expr            -> lora
             | "OPTIONS"i expr         -> options

?rag_clause: "TOP"i expr               -> top
           | "DOMAIN"i expr            -> domain
           | "USING"i "MODEL"i model   -> using_model
           | "OPTIONS"i expr           -> options

model: STRING | BIND
collection: NAME | COLLECTION_BIND

// -- expressions, loosest binding first ------------------------------------------------------
?expr: or_expr
     | or_expr "?" expr ":" expr             -> ternary

?or_expr: and_expr
        | or_expr ("OR"i | "||") and_expr    -> or_

?and_expr: not_expr
         | and_expr ("AND"i | "&&") not_expr -> and_

?not_expr: cmp_expr
         | ("NOT"i | "!") not_expr           -> not_

?cmp_expr: range_expr
         | cmp_expr CMP_OP range_expr        -> compare
         | cmp_expr "IN"i range_expr         -> in_
         | cmp_expr "NOT"i "IN"i range_expr  -> not_in
         | cmp_expr "LIKE"i range_expr       -> like

?range_expr: add_expr
           | add_expr ".." add_expr          -> range_

?add_expr: mul_expr
         | add_expr ADD_OP mul_expr          -> arith

?mul_expr: unary
         | mul_expr MUL_OP unary             -> arith

?unary: postfix
      | "-" unary                            -> neg
      | "+" unary

?postfix: primary
        | postfix "." NAME                   -> attr
        | postfix "[" expr "]"               -> index

?primary: NUMBER                             -> number
        | STRING                             -> string
        | "TRUE"i                            -> true
        | "FALSE"i                           -> false
        | "NULL"i                            -> null
        | BIND                               -> bind
        | NAME                               -> var
        | NAME "(" [expr ("," expr)*] ")"    -> call
        | "[" [expr ("," expr)* [","]] "]"   -> array
        | "{" [pair ("," pair)* [","]] "}"   -> object
        | "(" expr ")"

pair: (NAME | STRING) ":" expr
    | NAME                                   -> shorthand

EXPLAIN: "EXPLAIN"i
DISTINCT: "DISTINCT"i
ASC: "ASC"i
DESC: "DESC"i
CMP_OP: "==" | "!=" | "<=" | ">=" | "<" | ">"
ADD_OP: "+" | "-"
MUL_OP: "*" | "/" | "%"
NAME: /[A-Za-z_][A-Za-z0-9_]*/
BIND: /@[A-Za-z_][A-Za-z0-9_]*/
COLLECTION_BIND: /@@[A-Za-z_][A-Za-z0-9_]*/
NUMBER: /\d+(\.\d+)?([eE][+-]?\d+)?/
STRING: /"(?:[^"\\\n]|\\.)*"/ | /'(?:[^'\\\n]|\\.)*'/

COMMENT: /\/\/[^\n]*/ | /\/\*(.|\n)*?\*\//
%import common.WS
%ignore WS
%ignore COMMENT
"""
