"""Entry file for spark-submit (which wants a file, not a module):

    spark-submit --master spark://host:7077 --py-files burrow.zip spark/submit.py --logs ... --out ...
"""

from burrow.spark.__main__ import main

if __name__ == "__main__":
    main()
